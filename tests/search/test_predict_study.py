"""A real CPU study under a memory budget: a configuration predicted not to fit is not run.

The workload is gr00t_n16 with a 32 MiB activation per sample (``tests/search/wider.py``), so its
peak follows the micro-batch; the space holds the micro-batches alone. The budget lies between the
peaks of micro-batches of 1 and 2 samples (measured first), 5 % of headroom kept below the latter.
Stock (8 samples a micro-batch) and the ladder's first rung (4) run out of memory; the line through
their peaks predicts 2 samples over the budget: that rung is skipped; 1 sample is predicted to fit,
runs, and fits.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import optuna
import yaml

from autotune.cli import main
from autotune.config import load_config
from autotune.report.model import build_report
from autotune.search.predict import MARGIN, observed_peak
from autotune.search.trials import PREDICTED, PREDICTED_OOM, reason_of, record_of
from tests.studies import journal, measured_peak

WIDER = "tests.search.wider:Workload"
BATCH = 8
SPACE = {"knobs": {"memory.accumulation_steps": {"choices": [1, 2, 4, 8]}}}


def peak(tmp_path, steps: int) -> int:
    return measured_peak(tmp_path, WIDER, BATCH, steps)


def test_a_configuration_predicted_not_to_fit_is_skipped_and_recorded(tmp_path):
    with ThreadPoolExecutor(2) as pool:  # each launch is a process of its own: both at once
        two, one = pool.map(lambda k: peak(tmp_path, k), (4, 8))
    assert two / MARGIN > one * 1.1  # the activation shows in the measured peaks
    budget = int((one + two / MARGIN) / 2)
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    out = tmp_path / "run"
    code = main(
        ["run", "--workload", WIDER, "--preset", "tiny", "--synthetic", "--batch-size", str(BATCH),
         "--space", str(space), "--memory-budget", str(budget), "--trials", "4", "--steps", "2",
         "--warmup", "1", "--confirm-rounds", "0", "--no-prune", "--profile-steps", "0",
         "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    study = optuna.load_study(study_name=None, storage=journal(out))
    steps = [t.params["memory.accumulation_steps"] for t in study.trials]
    reasons = [reason_of(t) for t in study.trials]
    assert steps == [1, 2, 4, 8] and reasons == ["oom", "oom", PREDICTED_OOM, None], reasons
    t = study.trials[2]
    failure = record_of(t).failure
    assert failure.peak_bytes > MARGIN * budget and failure.budget_bytes == budget
    assert "predicted peak" in failure.error and t.value == 0.0  # told as out of memory
    assert t.user_attrs[PREDICTED]["peak_bytes"] == failure.peak_bytes
    assert two > budget  # the prediction was right: 2 samples a micro-batch run over the budget

    diagnosis = json.loads((out / "diagnosis.json").read_text())
    memory = diagnosis["stages"][0]
    assert {"trial": 2, "peak_bytes": failure.peak_bytes, "budget_bytes": budget,
            "fits": False, "predicted": True} in memory["memory"]  # fmt: skip
    assert memory["memory"][-1]["fits"] is True  # the study went on to a configuration that fits
    prediction = diagnosis["memory_prediction"]
    assert prediction["margin"] == MARGIN
    assert [s["trial"] for s in prediction["skipped"]] == [2]
    # trial 1 ran with its static bytes as a lower bound only (nothing of its kind measured yet)
    assert [(r["trial"], r["at_least"]) for r in prediction["trials"]] == [(1, True), (3, False)]
    row = prediction["trials"][1]
    assert row["predicted_bytes"] == study.trials[3].user_attrs[PREDICTED]["peak_bytes"]
    assert row["measured_bytes"] == observed_peak(study.trials[3])[0] <= budget
    assert prediction["median_abs_error"] == abs(row["error"]) < 0.1
    summary = build_report(out).summary  # the skipped rung is not run, not a failure
    assert (summary.skipped, summary.failed, summary.complete) == (1, 2, 1)
    page = (out / "report.html").read_text()  # the report's memory section shows both
    assert 'id="memory"' in page and f"not run: over {MARGIN} × the budget" in page
    best = load_config(out / "best.yaml")
    assert best.batch_size == BATCH and best.memory.accumulation_steps == 8
