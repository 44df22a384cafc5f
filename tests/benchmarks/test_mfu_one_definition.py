"""MFU has one definition: a study's ``trials.csv`` and the GPU suite's table give the same figure
for the same record (a real run's, on the CPU), and it is the record's own."""

from __future__ import annotations

import optuna
import pytest

from autotune.benchmarks.suite_table import rows
from autotune.search.output import record_columns
from autotune.search.trials import store
from autotune.train.trial.record import model_flops_utilization
from autotune.train.window.runner import run_training
from autotune.workloads.stock import stock_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def record():
    cfg = stock_config("gr00t_n16", "tiny", cuda=False)
    cfg.batch_size, cfg.data.source = 2, "synthetic"
    return run_training(cfg, steps=2, warmup=1).record()


def test_the_study_and_the_suite_give_the_same_mfu_for_the_same_record(record):
    m = record.measurement
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    store(trial, record)
    study.tell(trial, m.samples_per_s)
    csv = record_columns(study.trials[0])
    # the suite measures its own matmul rate once; MFU is still each record's (a different rate here)
    results = {
        "matmul": {"flops": 3 * m.matmul_tflops * 1e12},
        "runs": {"stock": {"record": record.to_dict()}},
    }
    (row,) = rows(results)
    assert row["mfu"] == csv["mfu"] == m.mfu > 0
    assert row["useful_mfu"] == csv["useful_mfu"] == m.useful_mfu > 0
    assert m.mfu == model_flops_utilization(
        m.flops_per_sample, m.samples_per_s, m.world_size, m.matmul_tflops
    )
