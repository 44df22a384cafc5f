"""A real CPU study under a memory budget: a configuration predicted not to fit is not run.

The workload is gr00t_n16 with a 16 MiB activation per sample (``tests/search/wider.py``), so its
peak follows the micro-batch. The budget lies between the peaks of micro-batches of 2 and 4
samples (measured first), 5 % of headroom kept below the latter. Stock (8 samples a micro-batch)
and its first rung (4) run out of memory; checkpointing at 8 samples has nothing comparable yet
and runs; checkpointing at 4 is then predicted from it and the other two (the study's line of
peak against micro-batch) over the budget and skipped; 4 micro-batches of 2 fit.
"""

from __future__ import annotations

import json

import optuna

from autotune.cli import main
from autotune.config import config_from_dict, load_config
from autotune.search.predict import MARGIN, observed_peak
from autotune.search.trials import PREDICTED, PREDICTED_OOM, reason_of, record_of
from autotune.train.trial.launch import launch
from tests.studies import journal

WIDER = "tests.search.wider:Workload"
BATCH = 8


def cfg(steps: int = 1, regions: list[str] | None = None):
    return config_from_dict(
        {
            "workload": WIDER,
            "preset": "tiny",
            "batch_size": BATCH,
            "device": "cpu",
            "data": {"source": "synthetic"},
            "memory": {"accumulation_steps": steps},
            "checkpointing": {"regions": regions or []},
        }
    )


def peak(tmp_path, c, name: str) -> int:
    record = launch(c, steps=2, warmup=1, timeout=240, log_path=tmp_path / f"{name}.log")
    assert record.failure is None, record.failure
    return record.measurement.memory.allocated_bytes


def test_a_configuration_predicted_not_to_fit_is_skipped_and_recorded(tmp_path):
    four, two = peak(tmp_path, cfg(2), "k2"), peak(tmp_path, cfg(4), "k4")
    assert four / MARGIN > two * 1.05  # the activation shows in the measured peaks
    budget = int((two + four / MARGIN) / 2)
    out = tmp_path / "run"
    code = main(
        ["run", "--workload", WIDER, "--preset", "tiny", "--synthetic", "--batch-size", str(BATCH),
         "--memory-budget", str(budget), "--trials", "5", "--steps", "2", "--warmup", "1",
         "--confirm-rounds", "0", "--no-prune", "--profile-steps", "0", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    study = optuna.load_study(study_name=None, storage=journal(out))
    skipped = [t for t in study.trials if reason_of(t) == PREDICTED_OOM]
    assert skipped, [(t.number, reason_of(t), t.params) for t in study.trials]
    t = skipped[0]
    failure = record_of(t).failure
    assert failure.peak_bytes > MARGIN * budget and failure.budget_bytes == budget
    assert "predicted peak" in failure.error and t.value == 0.0  # told as out of memory
    assert t.user_attrs[PREDICTED]["peak_bytes"] == failure.peak_bytes

    diagnosis = json.loads((out / "diagnosis.json").read_text())
    memory = diagnosis["stages"][0]
    assert {"trial": t.number, "peak_bytes": failure.peak_bytes, "budget_bytes": budget,
            "fits": False, "predicted": True} in memory["memory"]  # fmt: skip
    assert memory["memory"][-1]["fits"] is True  # the study went on to a configuration that fits
    prediction = diagnosis["memory_prediction"]
    assert prediction["margin"] == MARGIN
    assert [s["trial"] for s in prediction["skipped"]] == [s.number for s in skipped]
    assert prediction["trials"] and prediction["median_abs_error"] is not None
    for row in prediction[
        "trials"
    ]:  # every trial that ran with a prediction: predicted vs measured
        ran = study.trials[row["trial"]]
        assert row["predicted_bytes"] == ran.user_attrs[PREDICTED]["peak_bytes"]
        assert row["measured_bytes"] == observed_peak(ran)[0]
    assert prediction["max_abs_error"] < 0.15
    best = load_config(out / "best.yaml")
    assert best.batch_size == BATCH and best.memory.accumulation_steps > 1

    # the prediction was right: the configuration skipped runs over the budget
    regions = t.params.get("checkpointing.regions", "none")
    again = cfg(
        t.params["memory.accumulation_steps"], [] if regions == "none" else regions.split("+")
    )
    assert peak(tmp_path, again, "skipped") > budget
