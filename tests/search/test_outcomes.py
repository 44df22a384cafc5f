"""How trial outcomes feed the study, with ``launch`` replaced by a fake (fast: no training runs)."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from autotune.cli import main
from autotune.config import load_config
from autotune.search import objective
from autotune.search.trials import reason_of
from autotune.train.trial.record import TrialRecord
from tests.records import measured

GIB = 2**30


def fake_launch(outcomes):
    """A ``launch`` returning records by the trial's bucket size (the knob of the space below)."""

    def launch(cfg, **_):
        kind = outcomes[int(cfg.ddp.bucket_cap_mb)]
        if kind == "oom":
            return TrialRecord.failed("oom", "CUDA out of memory")
        speed, peak = kind
        return measured(speed, peak=peak)

    return launch


def run(tmp_path, monkeypatch, outcomes, budget="10GiB"):
    space = tmp_path / "b.yaml"
    space.write_text(
        "knobs:\n  ddp.bucket_cap_mb: {type: categorical, choices: [100, 200, 300, 400], group: comm}\n"
    )
    monkeypatch.setattr(objective, "launch", fake_launch(outcomes))
    out = tmp_path / "run"
    study = optuna.create_study(
        study_name="gr00t_n16-tiny-b",
        direction="maximize",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(out.mkdir() or out / "study.journal"))
        ),
    )
    study.enqueue_trial({"ddp.bucket_cap_mb": 100}, user_attrs={"stock": True})
    for mb in (200, 300, 400):
        study.enqueue_trial({"ddp.bucket_cap_mb": mb})
    code = main(
        [
            "run",
            "--preset",
            "tiny",
            "--space",
            str(space),
            "--trials",
            "4",
            "--memory-budget",
            budget,
            "--confirm-rounds",
            "0",
            "--converge-after",
            "0",
            "--out",
            str(out),
        ]
    )
    return (
        code,
        optuna.load_study(study_name="gr00t_n16-tiny-b", storage=study._storage).trials,
        out,
    )


def test_oom_is_an_infeasible_complete_trial_and_over_budget_loses(tmp_path, monkeypatch):
    code, trials, out = run(
        tmp_path,
        monkeypatch,
        {100: (10.0, 1 * GIB), 200: "oom", 300: (50.0, 20 * GIB), 400: (12.0, 2 * GIB)},
    )
    assert code == 0
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    oom = trials[1]
    assert oom.value == 0.0 and reason_of(oom) == "oom" and oom.user_attrs["constraint"] == 1.0
    assert trials[2].user_attrs["constraint"] == pytest.approx(1.0)  # 20 GiB against 10 GiB
    assert trials[0].user_attrs["constraint"] == pytest.approx(-0.9)
    best = load_config(out / "best.yaml")  # the fastest (300 MB, 50/s) is over the budget
    assert best.ddp.bucket_cap_mb == 400 and best.provenance["speedup_vs_stock"] == pytest.approx(
        1.2
    )
    assert best.provenance["memory_budget_bytes"] == 10 * GIB


def test_no_feasible_trial_is_an_error(tmp_path, monkeypatch, capsys):
    code, trials, out = run(
        tmp_path, monkeypatch, {m: (10.0, 4 * GIB) for m in (100, 200, 300, 400)}, budget="1GiB"
    )
    assert code == 2 and len(trials) == 4 and not (out / "best.yaml").exists()
    assert (
        "no trial of study 'gr00t_n16-tiny-b' ran within the memory budget"
        in capsys.readouterr().err
    )
    assert (out / "trials.csv").exists()


def test_a_study_whose_fitting_trials_all_failed_parity_says_so():
    from autotune.search.output import why_no_best
    from autotune.search.trials import attrs_of
    from tests.records import measured as measured_record

    study = optuna.create_study()
    failed = {"passed": False, "tolerance": 0.05, "loss_rel_diff": 0.1, "grad_norm_rel_diff": 0.2}
    study.add_trial(
        optuna.trial.create_trial(
            value=10.0, user_attrs=attrs_of(measured_record(10.0), parity=failed)
        )
    )
    assert why_no_best(study, 2**30) == (
        "kept loss parity: trials [0] ran but their losses or gradient norms differ from the "
        "reference's by more than the tolerance (parity in report.html and trials.csv)"
    )


def test_a_study_where_nothing_fits_says_the_least_predicted_need():
    """Stock out of memory, every rung predicted over the budget (repeats aside): the error line says
    so, with the least any configuration was predicted to need."""
    from autotune.search.output import why_no_best
    from autotune.search.trials import DUPLICATE, PREDICTED_OOM, attrs_of
    from autotune.train.trial.record import TrialRecord

    study = optuna.create_study()
    records = [
        TrialRecord.failed("oom", "out of memory", peak_bytes=12 * GIB, budget_bytes=12 * GIB),
        TrialRecord.failed(PREDICTED_OOM, "not run", peak_bytes=26 * GIB, budget_bytes=12 * GIB),
        TrialRecord.failed(
            PREDICTED_OOM, "not run", peak_bytes=int(14.5 * GIB), budget_bytes=12 * GIB
        ),
        TrialRecord.failed(DUPLICATE, "the same configuration as trial #1, not run again"),
    ]
    for record in records:
        study.add_trial(optuna.trial.create_trial(value=0.0, user_attrs=attrs_of(record)))
    assert why_no_best(study, 12 * GIB) == (
        "fit the memory budget: 1 configuration(s) ran out of memory and 2 were predicted to need "
        "more than --memory-budget 12.00 GiB; the least predicted need: at least 14.50 GiB (trial #2): "
        "raise the budget, or offer the memory stage leaner knobs (optimizer.offload, optimizer.impl: "
        "adamw4bit, checkpointing.regions)"
    )
    study.add_trial(
        optuna.trial.create_trial(
            value=0.0, user_attrs=attrs_of(TrialRecord.failed("crash", "exit code 1"))
        )
    )
    assert "fit the memory budget" not in why_no_best(study, 12 * GIB)  # another failure: not this
