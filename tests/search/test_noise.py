"""Noise, directions, convergence, confirmation and cost, unit by unit (no runs: trials built by hand)."""

from __future__ import annotations

import datetime
import time
from dataclasses import replace

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from autotune.search.confirm import (
    Run,
    _summary,
    _wide,
    candidates,
    clean_rounds,
    natural_spread,
    still_open,
)
from autotune.search.converge import convergence, plateau, plateau_left_s
from autotune.search.directions import PRECISION_RANK, raises_precision, search_choices
from autotune.search.guide import Guide
from autotune.search.noise import flags, margin, trusted_value, within
from autotune.search.progress import progress_line
from autotune.search.space import load_space, parse_space
from autotune.search.stage import Stage
from autotune.search.trials import attrs_of, best_trial, busy_s, measurement_of
from autotune.train.trial.record import INTERRUPTED, HostLoad, StepTimes, TrialRecord
from autotune.train.window.cost import PARTS, cost_of, with_wall
from tests.records import measured, measurement

PRECISION = {
    "precision.regions.dit": ["bf16", "fp32", "fp8"],
    "precision.regions.vision": ["bf16", "fp32"],
    "precision.frozen_dtype": ["bf16", "fp32"],
}


def add(study, params, value, dists, buckets=None, **attrs):
    record = measured(value, buckets=buckets)
    study.add_trial(
        create_trial(
            params=params,
            distributions=dists,
            value=value,
            user_attrs={**attrs_of(record), **attrs},
        )
    )
    return study.trials[-1]


def test_no_search_choice_raises_a_precision():
    for knob in load_space("gr00t_n16").knobs:
        if not knob.key.startswith("precision.") or not set(knob.choices) <= set(PRECISION_RANK):
            continue  # fp8_frozen_scaling: how fp8 scales, not a precision
        for current in knob.choices:
            allowed = search_choices(knob, current)
            assert allowed[0] == current
            assert all(PRECISION_RANK[v] <= PRECISION_RANK[current] for v in allowed), (
                knob.key,
                current,
                allowed,
            )
            assert not any(raises_precision(knob, current, v) for v in allowed)
    dit = next(k for k in load_space("gr00t_n16").knobs if k.key == "precision.regions.dit")
    assert search_choices(dit, "fp32") == ("fp32", "bf16", "fp8") and search_choices(
        dit, "fp8"
    ) == ("fp8",)


def test_the_precision_stage_never_proposes_raising_a_region(tmp_path):
    """From an incumbent with fp32 and bf16 regions, every trial the guide proposes lowers one region alone."""
    spec = {
        "knobs": {
            k: {"type": "categorical", "choices": c, "group": "precision"}
            for k, c in PRECISION.items()
        }
    }
    space = parse_space(spec, tmp_path / "s.yaml")
    dists = {k: CategoricalDistribution(c) for k, c in PRECISION.items()}
    study = optuna.create_study(direction="maximize")
    start = {
        "precision.regions.dit": "bf16",
        "precision.regions.vision": "fp32",
        "precision.frozen_dtype": "bf16",
    }
    inc = add(study, start, 10.0, dists, buckets={"compute_serial": 1.0}, stock=True)
    guide = Guide(space, stage_trials=6)
    proposed = []
    for _ in range(6):
        fixed, stage = guide.next_trial(study, inc)
        if stage.kind != "search":
            break
        assert stage.groups == ["precision"] and set(fixed) == set(
            PRECISION
        )  # enumerated, nothing left to the sampler
        proposed.append(fixed)
        stage.trials.append(
            add(study, fixed, 12.0, dists).number
        )  # each pays: the stage goes on to the next move
    assert proposed == [
        {**start, "precision.regions.dit": "fp8"},
        {**start, "precision.regions.vision": "bf16"},
    ]
    for p in proposed:
        assert all(PRECISION_RANK[p[k]] <= PRECISION_RANK[start[k]] for k in PRECISION)
        assert sum(p[k] != start[k] for k in PRECISION) == 1


def test_a_search_stage_ends_at_its_first_trial_within_noise(tmp_path):
    spec = {
        "knobs": {
            "ddp.comm_hook": {
                "type": "categorical",
                "choices": ["none", "bf16", "fp16"],
                "group": "comm",
            }
        }
    }
    space = parse_space(spec, tmp_path / "s.yaml")
    dists = {"ddp.comm_hook": CategoricalDistribution(["none", "bf16", "fp16"])}
    study = optuna.create_study(direction="maximize")
    inc = add(study, {"ddp.comm_hook": "none"}, 10.0, dists, buckets={"comm_wait": 1.0})
    guide = Guide(space, stage_trials=4)
    _, stage = guide.next_trial(study, inc)
    stage.trials.append(
        add(study, {"ddp.comm_hook": "bf16"}, 10.1, dists).number
    )  # 1 %: within the 3 % floor
    _, nxt = guide.next_trial(study, inc)
    assert nxt is not stage and nxt.kind == "free"


def test_noise_flags_a_wide_spread_and_a_busy_host():
    steady = StepTimes(median_ms=200, p10_ms=190, p90_ms=210, min_ms=185, max_ms=215, mean_ms=200)
    quiet = measured(10.0, step_time=steady)
    assert flags(quiet) == [] and margin(quiet.measurement, None) == pytest.approx(
        0.05
    )  # half the 10 % spread
    wide = measurement(
        10.0,
        step_time=StepTimes(
            median_ms=200, p10_ms=100, p90_ms=900, min_ms=90, max_ms=950, mean_ms=300
        ),
    )
    noisy = measured(10.0)
    noisy = type(noisy)(
        measurement=wide, host=HostLoad(others_busy=0.9, load_average=3.0, cpus=2, probe_s=0.3)
    )
    assert [f.split(" ")[0] for f in flags(noisy)] == ["step-time", "other"]
    assert margin(wide, quiet.measurement) == pytest.approx(2.0)
    again = type(noisy)(measurement=wide, remeasure=measured(6.0))
    assert trusted_value(again) == 6.0  # the lower of the two runs


def free_stage(trials, incumbent=1):
    return Stage(
        stage=3,
        bottleneck=None,
        share=None,
        groups=["all"],
        knobs=[],
        incumbent=incumbent,
        incumbent_samples_per_s=20.0,
        profile=None,
        buckets=None,
        dominant=None,
        kind="free",
        trials=trials,
    )


def test_a_study_converges_when_free_trials_find_nothing_within_noise():
    dists = {"x": CategoricalDistribution(["a", "b", "c", "d", "e", "f"])}
    study = optuna.create_study(direction="maximize")
    add(study, {"x": "a"}, 10.0, dists, stock=True)
    add(study, {"x": "b"}, 20.0, dists)
    add(study, {"x": "c"}, 15.0, dists)
    assert convergence(study, [free_stage([2])]) is None  # one miss: not yet
    add(study, {"x": "d"}, 16.0, dists)
    done = convergence(study, [free_stage([2, 3])])
    assert (
        done is not None
        and done.best_trial == 1
        and "the last 2 free trials found nothing" in done.reason
    )
    assert convergence(study, [free_stage([2, 3])], after=0) is None  # --converge-after 0: never
    # ties within noise keep the study going, up to twice as many free trials
    add(study, {"x": "e"}, 19.9, dists)
    assert convergence(study, [free_stage([2, 4])]) is None
    add(study, {"x": "f"}, 19.8, dists)
    done = convergence(study, [free_stage([2, 3, 4, 5])])
    assert done is not None and "none beat the best" in done.reason


def timed(study, params, value, dists, start_s, span_s, step_time=None, state=None, **attrs):
    """A measured trial that ran from ``start_s`` for ``span_s`` seconds."""
    record = measured(value) if step_time is None else measured(value, step_time=step_time)
    trial = create_trial(
        params=params,
        distributions=dists,
        value=value,
        user_attrs={**attrs_of(record), **attrs},
        **({} if state is None else {"state": state}),
    )
    zero = datetime.datetime(2026, 12, 1, 12, 0, 0)
    trial.datetime_start = zero + datetime.timedelta(seconds=start_s)
    trial.datetime_complete = trial.datetime_start + datetime.timedelta(seconds=span_s)
    study.add_trial(trial)


def test_a_study_left_to_itself_stops_when_a_trial_more_would_search_longer_than_finding_the_best_took():
    """The H200 study of commit 4d67cff: stock 29 s, the best in a 219-s trial, then trials of ~217 s."""
    dists = {"x": CategoricalDistribution(["a", "b", "c", "d", "e"])}
    study = optuna.create_study(direction="maximize")
    timed(study, {"x": "a"}, 48.5, dists, 0, 29, stock=True)
    assert plateau(study, 0) is None  # stock is the best: nothing found yet
    timed(study, {"x": "b"}, 205.8, dists, 29, 219)
    assert plateau(study, 1) is None  # nothing ran after the best
    timed(study, {"x": "c"}, 120.0, dists, 248, 60)
    assert plateau(study, 2) is None  # 60 s since, and another such trial: 120 s < 248 s
    timed(study, {"x": "d"}, 150.0, dists, 308, 217)
    done = plateau(study, 2)
    assert (
        done is not None
        and done.kind == "plateau"
        and done.best_trial == 1
        and done.trials == [2, 3]
    )
    assert "found nothing beyond noise" in done.reason and "248 s" in done.reason
    assert plateau(study, 2, ratio=3.0) is None and plateau(study, 2, ratio=0) is None
    # a tie within noise of the best does not move where the best was reached, and its time counts
    timed(study, {"x": "e"}, 206.0, dists, 525, 200)
    again = plateau(study, 2)
    assert again is not None and again.best_trial == 4 and again.trials == [2, 3, 4]
    assert "(#4, 206.00 samples/s; its level reached by #1 after 248 s" in again.reason


def test_a_later_best_that_only_ties_the_level_counts_as_time_that_found_nothing():
    """The flag-less N1.7 study of 2026-12-04 (H200): #1 the remedies, #2 fp8 in the frozen text
    layers, #3 the vision tower in fp8 too, 0.6 % faster (within the 3 % noise floor). Counting #3 as
    a new level left the study ~8 more minutes of 4-minute compiles; as a tie it ends after #3."""
    dists = {"x": CategoricalDistribution(["a", "b", "c", "d"])}
    study = optuna.create_study(direction="maximize")

    def steady(value, start, span, **attrs):  # the trials' steps within 1 %: the 3 % floor decides
        ms = 16_000 / value
        times = StepTimes(ms, 0.995 * ms, 1.005 * ms, 0.99 * ms, 1.01 * ms, ms)
        timed(study, {"x": "abcd"[len(study.trials)]}, value, dists, start, span, times, **attrs)

    steady(79.08, 0, 37, stock=True)
    steady(269.62, 37, 228)
    steady(282.40, 265, 214)
    assert plateau(study, 1) is None and plateau_left_s(study) == pytest.approx(479.0)
    steady(283.99, 479, 247)
    done = plateau(study, 2)
    assert done is not None and done.best_trial == 3 and done.trials == [3], done
    assert "its level reached by #2 after 479 s" in done.reason
    assert plateau_left_s(study) == pytest.approx(232.0)


def test_a_trial_lost_with_its_machine_is_not_time_that_found_nothing():
    """The flag-less N1.7 study of 2026-12-05 (H200): the machine went while #3 ran; the study was
    opened again 26 min later on a fresh one. #3's span to then (1557 s) read as search time ended the
    study at once ("converged already") instead of measuring #3's queued copy."""
    dists = {"x": CategoricalDistribution(["a", "b", "c", "d"])}
    study = optuna.create_study(direction="maximize")

    def steady(params, value, start, span, **attrs):  # steps within 1 %: the 3 % floor decides
        ms = 16_000 / value
        times = StepTimes(ms, 0.995 * ms, 1.005 * ms, 0.99 * ms, 1.01 * ms, ms)
        timed(study, params, value, dists, start, span, times, **attrs)

    steady({"x": "a"}, 67.19, 0, 44, stock=True)
    steady({"x": "b"}, 269.60, 44, 183)
    steady({"x": "c"}, 282.98, 227, 176)
    lost = TrialRecord.failed(INTERRUPTED, "its tuner vm:481 stopped before the trial ended")
    trial = create_trial(
        params={"x": "d"}, distributions=dists, state=TrialState.FAIL, user_attrs=attrs_of(lost)
    )
    zero = datetime.datetime(2026, 12, 1, 12, 0, 0)
    trial.datetime_start = zero + datetime.timedelta(seconds=403)
    trial.datetime_complete = trial.datetime_start + datetime.timedelta(seconds=1557)
    study.add_trial(trial)
    assert plateau(study, 2) is None and plateau_left_s(study) == pytest.approx(403.0)
    steady({"x": "d"}, 284.0, 1960, 180, queued_again_from=3)  # the copy: a tie
    assert plateau(study, 2) is None and plateau_left_s(study) == pytest.approx(223.0)
    # the study's tuning time: what its trials ran, not the 26 min between its two runs
    assert busy_s(study.trials) == pytest.approx(44 + 183 + 176 + 180)


def test_tuning_time_counts_trials_of_parallel_workers_once():
    dists = {"x": CategoricalDistribution(["a", "b", "c", "d"])}
    study = optuna.create_study(direction="maximize")
    timed(study, {"x": "a"}, 10.0, dists, 0, 30, stock=True)
    timed(study, {"x": "b"}, 20.0, dists, 30, 100)  # two workers: 30-130 and 40-90
    timed(study, {"x": "c"}, 15.0, dists, 40, 50)
    timed(study, {"x": "d"}, 15.0, dists, 200, 10)  # after a gap of 70 s
    assert busy_s(study.trials) == pytest.approx(130 + 10)
    assert busy_s([]) == 0.0


def test_a_noisy_loader_bound_stock_does_not_hide_a_best_five_times_faster():
    """The H200 study of commit 2873af4: stock loader-bound at 39.3 samples/s with steps of 188-662 ms
    (a margin of 108 %), the best 208.2 at 4:32, then a 194-s trial pruned at 207.1. Read as
    ``best * (1 - margin)``, stock counted as a tie with the best and the study searched on for 12 min."""
    dists = {"x": CategoricalDistribution(["a", "b", "c"])}
    study = optuna.create_study(direction="maximize")
    wide = StepTimes(
        median_ms=218.5, p10_ms=187.9, p90_ms=662.4, min_ms=167.1, max_ms=743.4, mean_ms=383.3
    )
    timed(study, {"x": "a"}, 39.27, dists, 0, 35, step_time=wide, stock=True)
    assert margin(measurement_of(study.trials[0]), None) > 1.0
    assert not within(39.27, 208.19, margin(measurement_of(study.trials[0]), None))
    assert within(208.19 / 2.0, 208.19, 1.0) and not within(208.19 / 2.1, 208.19, 1.0)
    assert plateau_left_s(study) is None  # stock is the best: the rule is not armed
    timed(study, {"x": "b"}, 208.19, dists, 35, 237)
    assert plateau_left_s(study) == pytest.approx(
        272.0
    )  # #0 and #1 took 272 s: as long again at most
    # the progress line's time left says so, rather than 29 more trials at this pace
    line = progress_line(study, study.trials[1], 2, 30, time.monotonic() - 272, 2, 30, plateau=True)
    assert line.endswith("~4:32 left unless a trial beats the best"), line
    assert "unless" not in progress_line(
        study, study.trials[1], 2, 30, time.monotonic() - 272, 2, 30
    )
    timed(study, {"x": "c"}, 207.11, dists, 272, 194, state=optuna.trial.TrialState.PRUNED)
    done = plateau(study, 2)
    assert (
        done is not None and done.best_trial == 1 and done.trials == [2] and "272 s" in done.reason
    )
    assert plateau_left_s(study) == pytest.approx(78.0)


def test_no_plateau_while_the_best_is_within_noise_of_stock():
    dists = {"x": CategoricalDistribution(["a", "b", "c"])}
    study = optuna.create_study(direction="maximize")
    timed(study, {"x": "a"}, 100.0, dists, 0, 10, stock=True)
    timed(study, {"x": "b"}, 100.5, dists, 10, 200)
    timed(study, {"x": "c"}, 90.0, dists, 210, 200)
    assert plateau(study, 1) is None


def test_confirmation_keeps_the_faster_of_best_and_runner_up_and_falls_back_to_stock():
    dists = {"x": CategoricalDistribution(["a", "b", "c"])}
    study = optuna.create_study(direction="maximize")
    stock = add(study, {"x": "a"}, 10.0, dists, stock=True)
    best = add(study, {"x": "b"}, 20.0, dists)
    runner = add(study, {"x": "c"}, 19.8, dists)  # within noise of the best: confirmed too
    assert [t.number for t in candidates(study)] == [1, 2] and best_trial(study).number == 1

    def runs(*rates):
        return [
            Run(round=r, trial=n, samples_per_s=v)
            for r, per in enumerate(rates, 1)
            for n, v in per.items()
        ]

    c = _summary(
        stock,
        [best, runner],
        runs({0: 10.0, 1: 12.0, 2: 13.0}, {0: 10.4, 1: 12.2, 2: 13.1}),
        2.0,
        "",
    )
    assert (
        c.trial == 2
        and c.speedup == pytest.approx((1.3 + 13.1 / 10.4) / 2)
        and c.rounds == 2
        and "runner-up" in c.note
    )
    assert c.spread["0"] == pytest.approx(0.4 / 10.2)
    # the study said 2x; measured again, neither beats stock: best.yaml is stock
    c = _summary(stock, [best, runner], runs({0: 10.0, 1: 9.0, 2: 9.5}), 2.0, "")
    assert c.trial == 0 and c.speedup == 1.0 and "no configuration beat stock" in c.note
    # a host whose load swung between the runs (the shared CPU machine): the rounds whose steps were steady count
    swung = [
        Run(1, 0, 2.23, 0.37),
        Run(1, 1, 2.08, 0.43),
        Run(2, 0, 0.43, 0.50),
        Run(2, 1, 2.09, 0.15),
        Run(3, 0, 0.97, 0.04),
        Run(3, 1, 15.1, 8.5),
        Run(4, 0, 17.47, 0.03),
        Run(4, 1, 18.14, 0.03),
    ]
    c = _summary(stock, [best], swung, 5.4, "")
    assert c.speedup == pytest.approx(18.14 / 17.47) and "round(s) 4 kept" in c.note
    c = _summary(stock, [best], [Run(1, 0, None, error="crash: x")], 2.0, "")
    assert not c.confirmed and "stock configuration failed" in c.note


def test_a_round_called_for_by_stock_alone_runs_stock_and_the_candidate_ahead():
    """The N1.7 default run's confirmation on one H200: stock (loader-bound) at 68.13 and 81.90 in
    rounds 1 and 2 (19 % apart: a third round), the best #3 at 281.43 and 281.70, the runner-up #2
    at 280.08 and 278.88. Round 3 runs stock and #3 only; a runner-up whose own rounds are wide runs
    too; which candidate is kept is decided over the rounds both ran."""
    dists = {"x": CategoricalDistribution(["a", "b", "c"])}
    study = optuna.create_study(direction="maximize")
    stock = add(study, {"x": "a"}, 70.29, dists, stock=True)
    runner = add(study, {"x": "b"}, 280.05, dists)
    best = add(study, {"x": "c"}, 281.58, dists)
    assert [t.number for t in candidates(study)] == [2, 1]

    def runs(*rates):
        return [
            Run(round=r, trial=n, samples_per_s=v, loader_bound=n == 0)
            for r, per in enumerate(rates, 1)
            for n, v in per.items()
        ]

    two = runs({0: 68.13, 2: 281.43, 1: 280.08}, {0: 81.90, 2: 281.70, 1: 278.88})
    assert _wide(two, [stock, best, runner])
    assert [t.number for t in still_open(two, [stock, best, runner])] == [0, 2]
    assert [t.number for t in still_open(two, [stock, best])] == [0, 2]
    shaky = runs({0: 68.13, 2: 281.43, 1: 250.0}, {0: 81.90, 2: 281.70, 1: 290.0})
    assert [t.number for t in still_open(shaky, [stock, best, runner])] == [0, 2, 1]
    # the runner-up ahead in the two rounds both ran is kept, though the best's ratio over all four
    # rounds (stock slow in rounds 3 and 4) is higher
    four = runs(
        {0: 70.0, 2: 280.0, 1: 282.0},
        {0: 70.0, 2: 280.0, 1: 282.0},
        {0: 60.0, 2: 280.0},
        {0: 60.0, 2: 280.0},
    )
    c = _summary(stock, [best, runner], four, 4.0, "")
    assert c.trial == 1 and c.speedup == pytest.approx(282.0 / 70.0) and "runner-up" in c.note


def test_a_loader_bound_stock_whose_steps_vary_by_nature_needs_no_extra_rounds():
    """Stock waits on its loader: its steps varied 77 % to 283 % in five runs on an idle H200 host (the
    session-5 study), its rate 38-45 samples/s. That is the loader's doing, not the host's, and a third
    and fourth round would not narrow it; a run of the best whose steps vary 20 % more than they do by
    nature is the host's."""
    dists = {"x": CategoricalDistribution(["a", "b"])}
    study = optuna.create_study(direction="maximize")
    ms = 1e3 * 16 / 45.0
    wide = StepTimes(
        median_ms=ms,
        p10_ms=0.9 * ms,
        p90_ms=1.67 * ms,
        min_ms=0.8 * ms,
        max_ms=3.5 * ms,
        mean_ms=ms,
    )
    study.add_trial(
        create_trial(
            params={"x": "a"},
            distributions=dists,
            value=45.0,
            user_attrs={**attrs_of(measured(45.0, step_time=wide)), "stock": True},
        )
    )
    stock = study.trials[-1]
    best = add(study, {"x": "b"}, 209.45, dists)
    assert natural_spread([stock], [])[0] == pytest.approx(0.77)
    runs = [
        Run(1, 0, 39.08, 1.11, loader_bound=True),
        Run(1, 1, 209.15, 0.01),
        Run(2, 0, 38.29, 2.83, loader_bound=True),
        Run(2, 1, 208.5, 0.02),
    ]
    assert not _wide(runs, [stock, best]) and clean_rounds(
        runs, natural_spread([stock, best], runs)
    ) == {1, 2}
    c = _summary(stock, [best], runs, 4.66, "")
    assert (
        c.rounds == 2
        and "kept" not in c.note
        and c.speedup == pytest.approx((209.15 / 39.08 + 208.5 / 38.29) / 2)
    )
    # the same stock read as host noise (not loader-bound) would have called for two more rounds
    assert _wide([replace(r, loader_bound=False) for r in runs], [stock, best])
    # the best's steps varied 25 % in round 2 against 1 % in round 1: another round, and round 2 not counted
    runs[3] = Run(2, 1, 190.0, 0.25)
    assert _wide(runs, [stock, best]) and clean_rounds(
        runs, natural_spread([stock, best], runs)
    ) == {1}


def test_cost_parts_are_exclusive_and_add_up_to_the_wall_time():
    ev = [
        (0, "begin", "start"),
        (1, "end", "start"),
        (1, "begin", "build"),
        (2, "end", "build"),
        (2, "begin", "warmup"),
        (2, "begin", "loader"),
        (2.5, "end", "loader"),
        (2.5, "begin", "compile"),
        (4, "end", "compile"),
        (6, "end", "warmup"),
        (6, "begin", "measure"),
        (8, "end", "measure"),
        (8, "begin", "profile"),
        (9, "end", "profile"),
    ]
    cost = cost_of([{"t": t, "ev": e, "part": p} for t, e, p in ev], 0.0, 10.0)
    assert cost.parts == pytest.approx(
        {
            "start": 1,
            "build": 1,
            "loader": 0.5,
            "compile": 1.5,
            "warmup": 2,
            "measure": 2,
            "profile": 1,
            "other": 1,
        }
    )
    assert sum(cost.parts.values()) == pytest.approx(cost.wall_s) == 10.0 and set(
        cost.parts
    ) <= set(PARTS)
    # killed in the middle of its compile: the minutes went to compiling
    killed = cost_of([{"t": t, "ev": e, "part": p} for t, e, p in ev[:8]], 0.0, 100.0)
    assert killed.parts["compile"] == pytest.approx(97.5) and sum(
        killed.parts.values()
    ) == pytest.approx(100.0)
    whole = with_wall(
        cost, 21.0, remeasure=cost
    )  # the trial's 21 s: its run, a second run, 1 s of the tuner's own
    assert whole.parts["remeasure"] == 10.0 and whole.parts["other"] == pytest.approx(2.0)
    assert whole.wall_s == pytest.approx(sum(whole.parts.values())) == pytest.approx(21.0)


def test_the_report_marks_a_bad_overhead_and_shows_a_loader_bound_step_at_its_rate():
    from autotune.report.parts import Profile, RankBuckets

    rank = RankBuckets(0, 174.0, {"compute_serial": 0.74, "data_stall": 0.26})
    stock = Profile(
        path="profiles/trial-0000",
        trial=0,
        traces=[],
        overhead=16.57,
        step_time_ms=174.0,
        ranks=[rank],
    )
    assert (
        stock.bad_overhead and not Profile(path="p", trial=1, traces=[], overhead=0.04).bad_overhead
    )
    assert Profile(path="p", trial=1, traces=[], overhead=-0.54).bad_overhead
    assert stock.scaled(rank) == (
        174.0,
        rank.buckets,
    )  # not loader-bound: the profiled step as it is
    stock.measured_step_ms = 276.0  # its 2 workers held it to this
    ms, shares = stock.scaled(rank)
    assert ms == 276.0 and shares["data_stall"] == pytest.approx((0.26 * 174 + 102) / 276)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["compute_serial"] * ms == pytest.approx(
        0.74 * 174
    )  # the compute the profile saw, unchanged


def test_no_confirmation_round_starts_that_cannot_run_the_best_before_the_deadline(tmp_path):
    """A 10-minute budget with 73 s left: stock's run (23 s) fits, the best's (~140 s, its compile
    from the cache) does not. No run starts (stock alone confirms nothing) and the note says why."""
    from dataclasses import replace as with_

    from autotune.search.confirm import confirm
    from autotune.train.trial.record import Cost

    dists = {"x": CategoricalDistribution(["a", "b"])}
    study = optuna.create_study(direction="maximize")
    for params, value, wall, compile_s in (
        ({"x": "a"}, 79.5, 23.0, 0.0),
        ({"x": "b"}, 129.8, 504.0, 426.6),
    ):
        record = with_(
            measured(value),
            cost=Cost(wall_s=wall, parts={"compile": compile_s, "other": wall - compile_s}),
        )
        study.add_trial(
            create_trial(
                params=params,
                distributions=dists,
                value=value,
                user_attrs={**attrs_of(record), **({"stock": True} if value < 100 else {})},
            )
        )
    opts = type(
        "Opts", (), {"out": tmp_path}
    )()  # nothing is launched: only the folder of an earlier confirmation
    lines = []
    c = confirm(opts, study, 2, deadline=time.monotonic() + 73.0, report=lines.append)
    assert c is not None and not c.confirmed and c.runs == [] and lines == []
    assert (
        "the time budget ended before the confirmation did (a round of stock and #1 takes ~143 s"
        in c.note
    )


def test_a_confirmation_run_costs_what_its_configuration_last_took_to_run_again():
    """N1.7's fp8 best on one H200: 234 s in its trial, 211 s of it compiling, AOTAutograd's cache
    bypassed (torchao's fp8 layers), ~140 s each time it ran again with the study's compile cache
    warm. Its estimate keeps 55 % of the compile where a cacheable graph keeps a tenth; a later
    round's deadline check takes the time its run took in the round before."""
    from dataclasses import replace as with_

    from autotune.search.confirm import again_s, run_cost_s
    from autotune.train.trial.record import Cost

    dists = {"x": CategoricalDistribution(["a", "b"])}
    study = optuna.create_study(direction="maximize")
    for params, counters in (
        ({"x": "a"}, {"fxgraph_cache_miss": 2, "autograd_cache_miss": 1}),
        ({"x": "b"}, {"fxgraph_cache_miss": 2, "autograd_cache_bypass": 1}),
    ):
        cost = Cost(wall_s=234.3, parts={"compile": 211.2, "other": 23.1}, compile_cache=counters)
        record = with_(measured(281.58), cost=cost)
        study.add_trial(
            create_trial(
                params=params, distributions=dists, value=281.58, user_attrs=attrs_of(record)
            )
        )
    cacheable, bypassed = study.trials
    assert run_cost_s(cacheable) == pytest.approx(234.3 - 0.9 * 211.2)
    assert again_s(bypassed, []) == run_cost_s(bypassed) == pytest.approx(234.3 - 0.45 * 211.2)
    assert again_s(bypassed, [Run(1, bypassed.number, 281.43, wall_s=139.6)]) == 139.6
    assert again_s(bypassed, [Run(1, bypassed.number, None, wall_s=None)]) == run_cost_s(bypassed)
