"""The report object of real tiny CPU studies: what ``build_report`` reads out of a run folder."""

from __future__ import annotations

import json
import shutil

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from autotune.report import build_report
from autotune.search.space import load_space

from .conftest import CRASHY_STUDY, journal

pytestmark = pytest.mark.slow


def test_report_of_a_cpu_study_holds_the_study(quick_run):
    report = build_report(quick_run)
    study = optuna.load_study(study_name="gr00t_n16-tiny-quick", storage=journal(quick_run))
    prov = yaml.safe_load((quick_run / "best.yaml").read_text())["provenance"]
    s = report.summary

    assert report.study_name == "gr00t_n16-tiny-quick" and report.status == "finished"
    pruned = [t.number for t in study.trials if t.state == TrialState.PRUNED]  # pruning may stop a slow trial
    assert (s.trials, s.finished, s.pruned, s.complete, s.failed, s.running) == (3, 3, len(pruned), 3 - len(pruned), 0, 0)
    assert s.stock_trial == 0 and s.stock_samples_per_s == study.trials[0].value
    assert s.best_trial == prov["trial"] and s.best_samples_per_s == prov["samples_per_s"]
    assert s.best_samples_per_s == max(t.value for t in study.trials if t.state == TrialState.COMPLETE)
    assert s.speedup == pytest.approx(prov["speedup_vs_stock"])
    assert s.best_peak_memory_bytes == prov["peak_memory_bytes"] and s.memory_budget_bytes == prov["memory_budget_bytes"]
    assert s.best_mfu == prov["mfu"] and 0 < s.tuning_time_s < 900

    assert [t.number for t in report.trials] == [0, 1, 2]
    for row, t in zip(report.trials, study.trials):
        assert row.state == t.state.name and row.log == f"logs/trial-{t.number:04d}.log"
        if t.number in pruned:
            assert row.outcome == "pruned" and row.samples_per_s == t.intermediate_values[max(t.intermediate_values)]
        else:
            assert row.outcome == "ok" and row.samples_per_s == t.value
    assert [t.stock for t in report.trials] == [True, False, False]
    assert [t.number for t in report.trials if t.best] == [s.best_trial]
    assert report.trial(s.best_trial).pareto  # the fastest trial is on the front whatever its memory
    assert report.param_names == sorted(k.key for k in load_space("quick").knobs)
    assert report.importances is not None and set(report.importances) <= set(report.param_names) or s.complete < 2
    assert report.best_yaml == (quick_run / "best.yaml").read_text()
    assert report.best_params == study.trials[s.best_trial].params
    assert report.environment["device"] == "cpu" and report.environment["world_size"] == 1
    json.dumps(report.to_dict())  # plain data


def test_failed_trials_are_reported_with_their_reason(failed_run):
    report = build_report(failed_run)
    s = report.summary
    assert (s.trials, s.complete, s.failed) == (3, 1, 2)
    ok, crash, refused = report.trials
    assert ok.stock and ok.best and ok.outcome == "ok" and not ok.failed
    assert crash.state == "FAIL" and crash.outcome in ("error", "crash") and crash.failed
    assert "this batch size always crashes" in crash.error
    assert refused.state == "FAIL" and refused.outcome == "config" and refused.failed
    assert "fp8 training needs a CUDA device" in refused.error and refused.log is None  # refused before launch
    assert s.best_trial == 0 and s.speedup == 1.0


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
    assert report.best_yaml is None and report.best_params == report.trial(report.summary.best_trial).params
    assert any("best.yaml is not written yet" in n for n in report.notes)


def test_oom_and_over_budget_trials(tmp_path, monkeypatch):
    """The tuner's outcomes a CPU cannot produce, from a study run with ``launch`` faked (tests/search)."""
    from tests.search.test_outcomes import GIB, run

    code, _, out = run(tmp_path, monkeypatch, {100: (10.0, 1 * GIB), 200: "oom", 300: (50.0, 20 * GIB),
                                               400: (12.0, 2 * GIB)})
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
    assert build_report(run, CRASHY_STUDY).summary.trials == 3
