"""A trial's expected cost against the time budget left: one that cannot finish is not started.

The study runs with ``launch`` replaced by one returning records with the cost a compiling trial
records (as in test_outcomes.py): the costs are what the decision reads, and a real compile of
minutes would make the test as slow as what it prevents."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from autotune.cli import main
from autotune.config import TrainConfig
from autotune.search import objective
from autotune.search.expected import expected_cost
from autotune.search.trials import reason_of, record_of
from autotune.train.trial.record import Cost
from tests.records import measured

COMPILE_S = 100.0
RUN_S = 5.0


def fake_launch(cfg, **_):
    """A run that records ``RUN_S`` of work, and ``COMPILE_S`` more of compiling where it compiles."""
    compiling = COMPILE_S if cfg.compile.regions else 0.0
    record = measured(10.0)
    parts = {"measure": RUN_S, "compile": compiling, "other": 0.0}
    return record.__class__(
        measurement=record.measurement, cost=Cost(wall_s=RUN_S + compiling, parts=parts)
    )


def test_a_trial_expected_to_outlast_the_budget_is_not_started_and_queued(
    tmp_path, monkeypatch, capsys
):
    space = tmp_path / "c.yaml"
    space.write_text(
        "knobs:\n  compile.regions: {type: categorical, choices: [[], [all]], group: compile}\n"
    )
    monkeypatch.setattr(objective, "launch", fake_launch)
    out = tmp_path / "run"
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out.mkdir() or out / "study.journal"))
    )
    name = "gr00t_n16-tiny-c"
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
    study.enqueue_trial({"compile.regions": "none"}, user_attrs={"stock": True})
    for regions in ("all", "all", "none"):  # the second compile is known to cost ~105 s
        study.enqueue_trial({"compile.regions": regions})
    argv = ["run", "--preset", "tiny", "--space", str(space), "--trials", "3", "--time-budget", "60s",
            "--confirm-rounds", "0", "--converge-after", "0", "--no-guidance", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    trials = optuna.load_study(study_name=name, storage=storage).trials
    assert [reason_of(t) for t in trials[:4]] == [None, None, "cost", None]
    error = record_of(trials[2]).failure.error
    assert error.startswith(
        "not started: expected ~105 s (5 s a run + 100 s compiling as trial #1)"
    )
    assert "s left of the time budget; queued for the next run" in error
    assert f"#2: {error}" in printed  # announced on its trial's line
    # not counted toward --trials (three ran), and queued again for the study's next run
    waiting = [t for t in trials if t.state == TrialState.WAITING]
    assert [t.system_attrs["fixed_params"] for t in waiting] == [{"compile.regions": "all"}]


def cfg(regions=(), mode="default") -> TrainConfig:
    c = TrainConfig(preset="tiny")
    c.compile.regions, c.compile.mode = list(regions), mode
    return c


def cost(run: float, compiling: float = 0.0) -> Cost:
    return Cost(wall_s=run + compiling, parts={"measure": run, "compile": compiling, "other": 0.0})


def test_the_expected_cost_of_a_compile_mode_not_measured_yet_scales_the_largest_compile():
    spent = [(0, cfg(), cost(10)), (1, cfg(["all"]), cost(12, 60)), (2, cfg(), cost(20))]
    assert expected_cost(cfg(), spent).seconds == 12  # the median run, nothing compiled
    assert expected_cost(cfg(["all"]), spent).seconds == 12 + 60  # as trial #1
    auto = expected_cost(cfg(["all"], "max-autotune"), spent)
    assert auto.seconds == 12 + 3 * 60 and "3x trial #1's 60 s in default" in auto.basis
    # a trial the budget stopped while it compiled: what it had spent counts, its run does not
    stopped = [*spent, (3, cfg(["all"], "max-autotune"), cost(0, 250))]
    later = expected_cost(cfg(["all"], "max-autotune"), stopped, frozenset({3}))
    assert later.seconds == 12 + 250
    assert expected_cost(cfg(), []) is None
