"""The report object of real tiny CPU studies: what ``build_report`` reads out of a run folder."""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from dataclasses import asdict

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from autotune.report import Stage, build_report
from autotune.search.space import load_space
from autotune.search.trials import busy_s

from .conftest import CRASHY_STUDY, REFERENCE, journal

pytestmark = pytest.mark.slow


def test_report_of_a_cpu_study_holds_the_study(quick_run):
    report = build_report(quick_run)
    study = optuna.load_study(study_name="gr00t_n16-tiny-quick", storage=journal(quick_run))
    prov = yaml.safe_load((quick_run / "best.yaml").read_text())["provenance"]
    s = report.summary

    assert report.study_name == "gr00t_n16-tiny-quick" and report.status == "finished"
    pruned = [
        t.number for t in study.trials if t.state == TrialState.PRUNED
    ]  # pruning may stop a slow trial
    # a configuration the sampler drew again is not run (skipped), neither measured nor failed
    assert (s.trials, s.finished, s.pruned, s.complete + s.skipped, s.failed, s.running) == (
        3,
        3,
        len(pruned),
        3 - len(pruned),
        0,
        0,
    )
    assert s.stock_trial == 0 and s.stock_samples_per_s == study.trials[0].value
    assert s.best_trial == prov["trial"] and s.best_samples_per_s == prov["samples_per_s"]
    # references are measured for comparison, never the best
    assert s.best_samples_per_s == max(
        t.value
        for t in study.trials
        if t.state == TrialState.COMPLETE and not t.user_attrs.get("reference")
    )
    assert s.speedup == pytest.approx(prov["speedup_vs_stock"])
    assert (
        s.best_peak_memory_bytes == prov["peak_memory_bytes"]
        and s.memory_budget_bytes == prov["memory_budget_bytes"]
    )
    assert s.best_mfu == prov["mfu"] and 0 < s.tuning_time_s < 900
    assert s.tuning_time_s == pytest.approx(busy_s(study.trials))
    assert s.best_useful_mfu == prov["useful_mfu"] and 0 < s.stock_useful_mfu < s.stock_mfu

    assert [t.number for t in report.trials] == [0, 1, 2]
    for row, t in zip(report.trials, study.trials):
        if (
            row.outcome == "duplicate"
        ):  # the sampler drew a measured configuration again: skipped, not run, no log
            assert row.state == "FAIL" and row.log is None and row.samples_per_s is None
            continue
        assert row.state == t.state.name and row.log == f"logs/trial-{t.number:04d}.log"
        if t.number in pruned:
            assert (
                row.outcome == "pruned"
                and row.samples_per_s == t.intermediate_values[max(t.intermediate_values)]
            )
        else:
            assert row.outcome == "ok" and row.samples_per_s == t.value
    assert [t.stock for t in report.trials] == [True, False, False]
    assert [t.reference for t in report.trials] == [
        None,
        REFERENCE,
        None,
    ]  # measured right after stock
    ref = study.trials[1]
    assert ref.params["optimizer.impl"] == "fused"
    ratio = ref.value / s.stock_samples_per_s if ref.state == TrialState.COMPLETE else None
    assert s.references == {REFERENCE: pytest.approx(ratio) if ratio else None}
    assert [t.number for t in report.trials if t.best] == [s.best_trial]
    fastest = max(
        (t for t in study.trials if t.state == TrialState.COMPLETE), key=lambda t: t.value
    )
    assert report.trial(
        fastest.number
    ).pareto  # the fastest trial (a reference too) is on the front whatever its memory
    # the study reads synthetic batches: the space's loader knobs are not searched
    searched = [k.key for k in load_space("quick").knobs if not k.key.startswith("data.")]
    assert report.param_names == sorted(searched)
    assert (
        report.importances is not None
        and set(report.importances) <= set(report.param_names)
        or s.complete < 2
    )
    assert report.best_yaml == (quick_run / "best.yaml").read_text()
    assert report.best_params == study.trials[s.best_trial].params
    assert report.environment["device"] == "cpu" and report.environment["world_size"] == 1
    json.dumps(report.to_dict())  # plain data


def test_failed_and_pruned_trials_are_reported_with_their_reason(failed_run):
    report = build_report(failed_run)
    s = report.summary
    assert (s.trials, s.finished, s.complete, s.failed, s.pruned) == (4, 4, 1, 2, 1)
    ok, crash, refused, pruned = report.trials
    assert ok.stock and ok.best and ok.outcome == "ok" and not ok.failed
    assert crash.state == "FAIL" and crash.outcome in ("error", "crash") and crash.failed
    assert "this batch size always crashes" in crash.error
    assert refused.state == "FAIL" and refused.outcome == "config" and refused.failed
    assert (
        "a queued value is not one of this machine's choices" in refused.error
        and refused.log is None
    )  # refused before launch
    assert pruned.state == "PRUNED" and pruned.outcome == "pruned" and not pruned.failed
    assert 0 < pruned.samples_per_s < ok.samples_per_s  # its last reported step
    assert s.best_trial == 0 and s.speedup == 1.0
    assert report.profiles == [] and any(
        "holds no profiles" in n for n in report.notes
    )  # --profile-steps 0


def test_diagnosis_profiles_and_parity_of_a_guided_run(quick_run):
    """What the tuner leaves beside the study (diagnosis.json, profiles/, parity.json), read into the report."""
    report = build_report(quick_run)
    study = optuna.load_study(study_name="gr00t_n16-tiny-quick", storage=journal(quick_run))
    diagnosis = json.loads((quick_run / "diagnosis.json").read_text())["stages"]
    assert [asdict(st) for st in report.stages] == [
        {**asdict(Stage(stage=0)), **raw} for raw in diagnosis
    ]
    first = report.stages[0]  # its incumbent: the faster of stock (#0) and the reference (#1)
    assert first.incumbent in (0, 1) and first.profile == f"profiles/trial-{first.incumbent:04d}"
    staged = {n: st.stage for st in report.stages for n in st.trials}
    assert {t.number: t.stage for t in report.trials if t.stage is not None} == staged
    assert all(
        t.group == study.trials[t.number].user_attrs["group"] for t in report.trials if t.stage
    )

    stock, best = report.stock_profile, report.best_profile
    assert stock.trial == 0 and stock.path == "profiles/trial-0000" and stock.device == "cpu"
    assert (
        stock.traces == ["profiles/trial-0000/rank0.pt.trace.json.gz"]
        and (quick_run / stock.traces[0]).is_file()
    )
    assert [r.rank for r in stock.ranks] == [0] and sum(
        stock.ranks[0].buckets.values()
    ) == pytest.approx(1.0)
    assert stock.top_kernels and stock.top_kernels[0].name.startswith("aten::")
    assert best.trial == report.summary.best_trial and best.ranks
    assert [p.trial for p in report.profiles] == sorted(
        int(d.name[6:]) for d in (quick_run / "profiles").iterdir()
    )

    parity = json.loads((quick_run / "parity.json").read_text())
    assert (
        report.summary.parity.passed == parity["passed"]
        and report.summary.parity.tolerance == parity["tolerance"]
    )
    assert report.summary.parity.loss_rel_diff == parity["loss_rel_diff"]


def test_interrupted_study_is_reported_as_such(quick_run, tmp_path):
    """What an interrupted tuner leaves: a trial asked and never told, no best.yaml yet."""
    run = tmp_path / "run"
    shutil.copytree(quick_run, run)
    (run / "best.yaml").unlink()
    (run / "run.json").unlink(missing_ok=True)
    optuna.load_study(study_name="gr00t_n16-tiny-quick", storage=journal(run)).ask()

    report = build_report(run)
    assert report.status == "running or interrupted"
    assert (report.summary.trials, report.summary.finished, report.summary.running) == (4, 3, 1)
    assert report.trials[3].state == "RUNNING" and report.trials[3].samples_per_s is None
    assert (
        report.best_yaml is None
        and report.best_params == report.trial(report.summary.best_trial).params
    )
    assert any("best.yaml is not written yet" in n for n in report.notes)
    # the page says the study has not ended, not that it ran to --trials
    from autotune.report import write_report

    html = write_report(run).read_text()
    ended = re.search(
        r'how the study ended</div><div class="v">(.*?)</div><div class="d">(.*?)</div>', html
    ).groups()
    assert ended == ("not ended", "still running, or stopped before it ended (no best.yaml)"), ended
    assert "1 running or queued" in html


def test_tuning_time_leaves_out_the_time_between_two_runs_of_the_study(quick_run, tmp_path):
    """A study continued an hour after its tuner was lost: the trial it lost (failed when the study
    was opened again) and the hour are not tuning time; the continued run's trial is."""
    import datetime

    from autotune.search.trials import attrs_of
    from autotune.train.trial.record import INTERRUPTED, TrialRecord

    run = tmp_path / "run"
    shutil.copytree(quick_run, run)
    study = optuna.load_study(study_name="gr00t_n16-tiny-quick", storage=journal(run))
    before = busy_s(study.trials)
    end = max(t.datetime_complete for t in study.trials)
    lost = optuna.trial.create_trial(
        params={},
        distributions={},
        state=TrialState.FAIL,
        user_attrs=attrs_of(TrialRecord.failed(INTERRUPTED, "its tuner stopped")),
    )
    lost.datetime_start, lost.datetime_complete = end, end + datetime.timedelta(hours=1)
    study.add_trial(lost)
    again = optuna.trial.create_trial(params={}, distributions={}, value=1.0)
    again.datetime_start = end + datetime.timedelta(hours=1)
    again.datetime_complete = again.datetime_start + datetime.timedelta(seconds=20)
    study.add_trial(again)

    assert build_report(run).summary.tuning_time_s == pytest.approx(before + 20)


def test_oom_and_over_budget_trials(tmp_path, monkeypatch):
    """The tuner's outcomes a CPU cannot produce, from a study run with ``launch`` faked (tests/search)."""
    from tests.search.test_outcomes import GIB, run

    code, _, out = run(
        tmp_path,
        monkeypatch,
        {100: (10.0, 1 * GIB), 200: "oom", 300: (50.0, 20 * GIB), 400: (12.0, 2 * GIB)},
    )
    assert code == 0
    report = build_report(out)
    outcomes = [t.outcome for t in report.trials]
    assert outcomes == ["ok", "oom", "over budget", "ok"]
    assert report.summary.failed == 1 and report.summary.complete == 3
    assert report.summary.best_trial == 3 and report.summary.memory_budget_bytes == 10 * GIB
    # 300 MB is fastest (over the budget), 100 MB leanest: both on the front with it; 400 MB too
    assert {t.number for t in report.trials if t.pareto} == {0, 2, 3}
    assert report.trials[1].failed and not report.trials[2].failed


def test_a_storage_with_several_studies_needs_a_name(failed_run, tmp_path):
    from autotune.errors import ReportError

    run = tmp_path / "run"
    shutil.copytree(failed_run, run)
    (run / "best.yaml").unlink()
    (run / "run.json").unlink(missing_ok=True)  # neither names the study
    optuna.create_study(study_name="other", storage=journal(run))
    with pytest.raises(ReportError, match=r"holds several studies .*choose one with --study"):
        build_report(run)
    assert build_report(run, CRASHY_STUDY).summary.trials == 4


def test_a_study_in_a_database_needs_its_password(quick_run, tmp_path):
    """run.json keeps a database URL without its password: the report asks for it, then reads the study."""
    server = os.environ.get("AUTOTUNE_TEST_POSTGRES") or pytest.skip(
        "AUTOTUNE_TEST_POSTGRES is not set (.ci/run sets it)"
    )
    psycopg = pytest.importorskip("psycopg")
    from sqlalchemy.engine import make_url

    from autotune.errors import ReportError
    from autotune.search.storage import open_storage

    admin, name = (
        make_url(server).set(drivername="postgresql"),
        f"autotune_report_{uuid.uuid4().hex[:8]}",
    )
    with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = make_url(server).set(database=name)
        run = tmp_path / "run"
        shutil.copytree(quick_run, run)
        (run / "study.journal").unlink()
        optuna.copy_study(
            from_study_name="gr00t_n16-tiny-quick",
            from_storage=journal(quick_run),
            to_storage=open_storage(url.render_as_string(hide_password=False), run),
        )
        info = json.loads((run / "run.json").read_text())
        (run / "run.json").write_text(
            json.dumps({**info, "storage": url.render_as_string(hide_password=True)})
        )
        with pytest.raises(
            ReportError,
            match=r"the study is in the database postgresql://.*:\*\*\*@.*--storage URL",
        ):
            build_report(run)
        report = build_report(run, storage=url.render_as_string(hide_password=False))
        assert (
            report.summary == build_report(quick_run).summary
            and report.stages == build_report(quick_run).stages
        )
    finally:
        with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_importances_cover_only_the_knobs_that_varied():
    """A stage holds most knobs at the incumbent's values: those get no importance bar."""
    from optuna.distributions import CategoricalDistribution, IntDistribution
    from optuna.trial import create_trial

    from autotune.report.model import varied_params

    dists = {"a": IntDistribution(0, 4), "b": CategoricalDistribution(["x", "y"])}
    trials = [
        create_trial(params={"a": a, "b": "x"}, distributions=dists, value=float(a))
        for a in (0, 2, 4)
    ]
    assert varied_params(trials) == ["a"]
    trials.append(create_trial(params={"a": 1}, distributions={"a": dists["a"]}, value=1.0))
    assert varied_params(trials) == ["a"] and varied_params([]) == []


def test_a_loader_bound_trial_shows_what_its_window_ran_at(tmp_path):
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    from autotune.report.parts import trial_row
    from autotune.search.trials import attrs_of
    from tests.records import measured

    bound = attrs_of(measured(230.0, window=652.0, bound=True, peak=1), constraint=-0.5)
    t = create_trial(
        params={"x": 0.5},
        distributions={"x": FloatDistribution(0, 1)},
        value=230.0,
        user_attrs=bound,
    )
    row = trial_row(t, tmp_path, stock=False, best=True, pareto=False)
    assert (row.samples_per_s, row.window_samples_per_s, row.peak_memory_bytes, row.outcome) == (
        230.0,
        652.0,
        1,
        "ok",
    )
    t = create_trial(
        params={"x": 0.5},
        distributions={"x": FloatDistribution(0, 1)},
        value=230.0,
        user_attrs=attrs_of(measured(230.0, peak=1)),
    )
    assert trial_row(t, tmp_path, stock=False, best=True, pareto=False).window_samples_per_s is None


def test_a_loader_first_stage_says_why_in_the_chain(quick_run, tmp_path):
    """A stage the guide opened because the incumbent's loader set its rate says so, with the wait as its share."""
    from autotune.report.render import write_report

    run = tmp_path / "run"
    shutil.copytree(quick_run, run)
    diagnosis = json.loads((run / "diagnosis.json").read_text())
    diagnosis["stages"][0].update(bottleneck="data_stall", share=0.1, loader_bound=True)
    (run / "diagnosis.json").write_text(json.dumps(diagnosis))
    assert build_report(run).stages[0].loader_bound
    html = write_report(run).read_text()
    assert (
        "bottleneck <b>data_stall</b> (10.0 % of the step, waiting on a loader that set the measured rate)"
        in html
    )
    assert html.count("waiting on a loader") == 1  # the other stages: the profile's share alone


def test_a_stage_without_a_measured_trial_says_what_became_of_its_trials(quick_run, tmp_path):
    """A stage whose trials were all pruned or failed names each one's outcome, not "no feasible trial"."""
    from autotune.report.render import write_report

    run = tmp_path / "run"
    shutil.copytree(quick_run, run)
    diagnosis = json.loads((run / "diagnosis.json").read_text())
    last = diagnosis["stages"][-1]
    last.update(best_trial=None, best_samples_per_s=None, gain=None, trials=[0, 1])
    diagnosis["stages"].append({**last, "stage": last["stage"] + 1, "trials": []})
    (run / "diagnosis.json").write_text(json.dumps(diagnosis))
    report = build_report(run)
    html = write_report(run).read_text()
    outcomes = ", ".join(f"#{n} {report.trial(n).outcome}" for n in (0, 1))
    assert f"no trial measured to its end: {outcomes}" in html and "no trial yet" in html


def test_a_confirmation_that_kept_another_trial_is_what_the_summary_shows(quick_run, tmp_path):
    """Measured again, the study's best lost (to stock, or to a runner-up): the summary's MFU and memory are
    the kept trial's, with a note saying the confirmation kept it (not that the study moved on since)."""
    run = tmp_path / "run"
    shutil.copytree(quick_run, run)
    data = yaml.safe_load((run / "best.yaml").read_text())
    prov = data["provenance"]
    best = build_report(run).summary.best_trial
    kept = next(t for t in build_report(run).trials if t.number != best and t.mfu is not None)
    note = "measured again, the study's best ran slower"
    prov.update(
        trial=kept.number,
        study_best_trial=best,
        confirmed=True,
        confirmation={
            "trial": kept.number,
            "stock_trial": 0,
            "speedup": 1.0,
            "samples_per_s": 5.0,
            "stock_samples_per_s": 5.0,
            "rounds": 2,
            "note": note,
        },
    )
    (run / "best.yaml").write_text(yaml.safe_dump(data))
    report = build_report(run)
    assert report.summary.best_trial == kept.number and report.summary.speedup == 1.0
    assert (
        report.summary.best_mfu == kept.mfu
        and report.summary.best_peak_memory_bytes == kept.peak_memory_bytes
    )
    assert any(
        f"not the study's best #{best}: the confirmation kept it ({note})" in n
        for n in report.notes
    ), report.notes
    assert not any("is now" in n for n in report.notes)


def test_a_trial_that_changes_what_is_computed_says_so_and_so_does_the_page(quick_run, tmp_path):
    """Low-bit optimizer states and fp8 layers are declared to change the numerics: the trial's row,
    the best's summary and the page say that loss parity decides; exact knobs are not named."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import create_trial

    from autotune.report.model import load_report
    from autotune.report.parts import trial_row
    from autotune.report.render import render_html

    params = {
        "optimizer.impl": "adamw8bit",
        "precision.regions.dit": "fp8",
        "precision.regions.vision": "bf16",
        "memory.accumulation_steps": 2,
    }
    dists = {k: CategoricalDistribution([v]) for k, v in params.items()}
    row = trial_row(
        create_trial(params=params, distributions=dists, value=1.0),
        tmp_path,
        stock=False,
        best=True,
        pareto=False,
    )
    assert row.numerics == {"optimizer.impl": "adamw8bit", "precision.regions.dit": "fp8"}

    report, study = load_report(quick_run)
    assert report.summary.best_numerics is None  # the quick study's knobs are all exact
    best = report.trial(report.summary.best_trial)
    best.numerics = report.summary.best_numerics = {"optimizer.impl": "adamw8bit"}
    html = render_html(report, study)
    assert (
        "<b>changes what is computed</b>: optimizer.impl: adamw8bit; loss parity with stock decides"
        in html
    )
    assert "changes what is computed (optimizer.impl): parity decides" in html


def test_importances_learn_from_measured_trials_only():
    """Out-of-memory trials complete at 0 samples/s, infeasible: with one measured trial beside
    them there is nothing to learn about speed, and no importance is drawn."""
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import create_trial

    from autotune.report.model import _importances, measured_study
    from autotune.search.trials import attrs_of
    from autotune.train.trial.record import TrialRecord
    from tests.records import measured

    dists = {
        "impl": CategoricalDistribution(["foreach", "adamw8bit"]),
        "k": CategoricalDistribution([1, 2]),
    }
    study = optuna.create_study(direction="maximize")
    oom = TrialRecord.failed("oom", "out of memory", peak_bytes=30, budget_bytes=24)
    for k in (1, 2):
        study.add_trial(
            create_trial(params={"impl": "foreach", "k": k}, distributions=dists, value=0.0,
                         user_attrs=attrs_of(oom, constraint=0.2))
        )  # fmt: skip
    study.add_trial(
        create_trial(params={"impl": "adamw8bit", "k": 1}, distributions=dists, value=28.9,
                     user_attrs=attrs_of(measured(28.9, peak=19), constraint=-0.2))
    )  # fmt: skip
    assert [t.number for t in measured_study(study).trials] == [0]
    notes: list[str] = []
    assert _importances(study, notes) is None
    assert notes == ["parameter importances need at least 2 measured trials with parameters"]


def test_a_lower_bound_holds_where_the_peak_reached_it_or_the_allocator_refused_first():
    from autotune.report.memory import PredictedPeak

    def row(measured, exact=True):
        return PredictedPeak(1, 100, measured, (100 - measured) / measured, exact, at_least=True)

    assert row(120).held and not row(90).held and row(90, exact=False).held


def test_a_launch_bound_stock_says_its_ratio_is_the_hosts(quick_run, tmp_path):
    """Stock's GPU step mostly waiting on kernel launches: the speed-up card says the ratio is this
    host's (a CPU's launch overhead, or a small share of it, says nothing)."""
    from autotune.report.render import write_report

    run = tmp_path / "run"
    shutil.copytree(quick_run, run)
    stock = build_report(run).stock_profile
    summary_file = run / stock.path / "classification.summary"
    summary = json.loads(summary_file.read_text())
    assert "host CPU" not in write_report(run).read_text()  # a CPU study's launch overhead

    def page(device: str, share: float) -> str:
        c = summary["classification"]
        c.update(device=device, buckets={**c["buckets"], "launch_overhead": share})
        summary_file.write_text(json.dumps(summary))
        return write_report(run).read_text()

    assert "stock's step is 36 % launch overhead" in page("gpu", 0.36)
    assert "host CPU" not in page("gpu", 0.1)
    assert "host CPU" not in page("cpu", 0.36)


def test_a_trial_off_its_distribution_is_left_out_of_the_importances_with_a_note():
    """Optuna keeps an enqueued value its distribution does not hold (stock off a step the range did
    not tile): copying that trial into the importances' study raised, and ``report`` printed a
    traceback."""
    import warnings

    import optuna

    from autotune.report.model import _importances, measured_study
    from autotune.search.trials import attrs_of
    from tests.records import measured

    study = optuna.create_study(direction="maximize")
    study.enqueue_trial({"bucket": 100.0})
    for rate in (10.0, 12.0, 9.0, 15.0):
        trial = study.ask()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            trial.suggest_float("bucket", 25, 400, step=50)
            trial.suggest_int("streams", 1, 2)
        for key, value in attrs_of(measured(rate)).items():
            trial.set_user_attr(key, value)
        study.tell(trial, rate)
    assert study.trials[0].params["bucket"] == 100.0
    notes: list[str] = []
    copied = measured_study(study, notes).trials
    assert [t.params["bucket"] for t in copied] == [t.params["bucket"] for t in study.trials[1:]]
    assert notes == [
        "trial #0 is left out of the parameter importances: the value 100.0 of parameter "
        "'bucket' isn't contained in the distribution FloatDistribution(high=375.0, log=False, "
        "low=25.0, step=50.0)."
    ]
    assert _importances(study, []) is not None
