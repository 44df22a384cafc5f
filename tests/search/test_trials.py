"""The trials of a study as records: stored once, read back by every layer, a real study's too."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from autotune.search.bottleneck import buckets_of
from autotune.search.storage import open_storage
from autotune.search.trials import (
    BUDGET,
    CONSTRAINT,
    RECORD,
    STOCK,
    attrs_of,
    best_trial,
    feasible,
    measurement_of,
    reason_of,
    record_of,
    stock_trial,
    store,
)
from autotune.train.trial.record import TrialRecord
from autotune.train.window.verify import compare
from tests.records import measured

H200 = Path(__file__).parents[2] / "reports" / "examples" / "full-1gpu-h200"  # a real study


def test_a_stored_record_reads_back_equal_and_the_constraint_reaches_the_sampler():
    study = optuna.create_study(direction="maximize")
    record = measured(12.0, buckets={"data_stall": 0.6, "other": 0.4}, peak=3 * 2**30)
    trial = study.ask()
    store(trial, record, constraint=-0.5, profile_dir="profiles/trial-0000")
    study.tell(trial, 12.0)
    frozen = study.trials[0]
    assert record_of(frozen) == record and measurement_of(frozen) == record.measurement
    assert set(frozen.user_attrs) == {RECORD, CONSTRAINT, "profile_dir"} and isinstance(
        frozen.user_attrs[RECORD], str
    )
    assert frozen.system_attrs["constraints:memory"] == -0.5
    assert (
        feasible(frozen)
        and reason_of(frozen) is None
        and buckets_of(frozen) == {"data_stall": 0.6, "other": 0.4}
    )


def test_failures_are_records_and_long_errors_are_cut():
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    store(trial, TrialRecord.failed("config", "x" * 5000))
    study.tell(trial, state=TrialState.FAIL)
    oom = study.ask()
    store(oom, TrialRecord.failed("oom", "CUDA out of memory"), constraint=1.0)
    study.tell(oom, 0.0)
    refused, oom = study.trials
    assert reason_of(refused) == "config" and len(record_of(refused).failure.error) == 2000
    assert (
        reason_of(oom) == "oom" and not feasible(oom) and best_trial(study) is None
    )  # complete, value 0: no winner


def test_best_and_stock_among_stopped_failed_and_reference_trials():
    study = optuna.create_study(direction="maximize")
    dist = {"x": FloatDistribution(0, 1)}

    def add(value, record, state=TrialState.COMPLETE, constraint=-0.5, **attrs):
        study.add_trial(
            create_trial(
                params={"x": 0.5},
                distributions=dist,
                value=value,
                state=state,
                user_attrs={**attrs_of(record, constraint=constraint), **attrs},
            )
        )

    # stock stopped by the budget (queued again), then measured
    add(None, TrialRecord.failed(BUDGET, "stopped"), TrialState.FAIL, stock=True)
    add(10.0, measured(10.0), stock=True)
    add(30.0, measured(30.0), constraint=0.2)  # over the memory budget
    add(20.0, measured(20.0), constraint=-0.1)
    add(50.0, measured(50.0), reference="compile")  # a reference is never the best
    assert stock_trial(study).number == 1 and measurement_of(study.trials[1]).samples_per_s == 10.0
    assert best_trial(study).number == 3
    assert [feasible(t) for t in study.trials] == [False, True, False, True, True]


def load_h200() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=None, storage=open_storage(None, H200))


def test_a_real_study_reads_back_as_its_best_yaml_and_parity_say():
    """The study journal of a real 1-GPU H200 run: what its best.yaml and parity.json say is what
    the records give again."""
    study = load_h200()
    prov = yaml.safe_load((H200 / "best.yaml").read_text())["provenance"]
    parity = json.loads((H200 / "parity.json").read_text())
    best, stock = best_trial(study), stock_trial(study)
    assert (best.number, stock.number) == (prov["trial"], prov["stock_trial"])
    assert stock.user_attrs[STOCK]
    m = measurement_of(best)
    assert (m.samples_per_s, m.step_time.median_ms, m.memory.allocated_bytes) == (
        prov["study_samples_per_s"],
        prov["step_time_ms"],
        prov["peak_memory_bytes"],
    )
    assert measurement_of(stock).samples_per_s == prov["study_stock_samples_per_s"]
    assert m.mfu == prov["mfu"] and m.environment == prov["environment"]
    again = compare(measurement_of(stock), m, parity["tolerance"])
    assert (
        again.loss_rel_diff == parity["loss_rel_diff"]
        and again.grad_norm_rel_diff == parity["grad_norm_rel_diff"]
    )
    assert [reason_of(t) for t in study.trials] == [None, None, "pruned", "pruned", BUDGET, None]
    assert record_of(study.trials[5]) is None  # queued again, waiting: nothing measured
    assert (
        sum(buckets_of(stock).values()) == pytest.approx(1.0)
        and record_of(stock).profile.dominant == "compute_serial"
    )
