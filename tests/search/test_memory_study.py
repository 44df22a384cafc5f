"""A study under a memory budget that stock exceeds finds a configuration that fits, at the same batch.

The workload is gr00t_n16 with a wide activation per sample (``tests/search/wide.py``), so its peak
follows the micro-batch; on a CPU the trials' measured peaks are checked against the budget. The
budget is set between stock's peak and that of 8 micro-batches, both measured first: the ladder's
first rung on a CPU (2 micro-batches, half the wide activation) fits it, so two trials (stock and
that rung) make the whole memory stage; the stages after a fit are ``test_guide``'s.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import optuna

from autotune.cli import main
from autotune.config import load_config
from autotune.report.model import build_report
from autotune.search.trials import record_of
from autotune.train.window.verify import verify
from tests.studies import journal, measured_peak

WIDE = "tests.search.wide:Workload"
BATCH = 8


def peak(tmp_path, steps: int) -> int:
    return measured_peak(tmp_path, WIDE, BATCH, steps)


def test_a_budget_stock_exceeds_leads_to_a_configuration_that_fits(tmp_path, capsys):
    with ThreadPoolExecutor(2) as pool:  # each launch is a process of its own: both at once
        stock_peak, small_peak = pool.map(lambda k: peak(tmp_path, k), (1, 8))
    assert stock_peak - small_peak > 64 * 2**20  # the wide activation shows in the measured peak
    budget = (stock_peak + small_peak) // 2
    out = tmp_path / "run"
    code = main(
        ["run", "--workload", WIDE, "--preset", "tiny", "--synthetic", "--batch-size", str(BATCH),
         "--memory-budget", str(budget), "--trials", "2", "--steps", "2", "--warmup", "1",
         "--profile-steps", "0", "--confirm-rounds", "0", "--no-prune", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    assert (
        "(stock does not fit the memory budget: no speed-up over it to state)"
        in capsys.readouterr().out
    )
    stages = json.loads((out / "diagnosis.json").read_text())["stages"]
    memory = stages[0]
    assert memory["kind"] == "memory" and memory["bottleneck"] == "memory"
    assert memory["memory"][0]["fits"] is False  # stock, out of memory with its peak
    assert memory["memory"][0]["peak_bytes"] > budget
    assert memory["memory"][-1]["fits"] is True and memory["memory"][-1]["peak_bytes"] <= budget
    best = load_config(out / "best.yaml")
    assert best.batch_size == BATCH  # the user's batch, fitted by micro-batches
    assert best.memory.accumulation_steps > 1
    parity = verify(best, steps=6, timeout=240)  # against stock at the same batch, uncapped
    assert parity.passed, parity

    # the loss-parity reference: stock trained to its end over the budget and kept its losses
    study = optuna.load_study(study_name=None, storage=journal(out))
    stock = study.trials[0]
    assert record_of(stock).failure.reason == "oom" and record_of(stock).failure.losses
    fitted = study.trials[memory["memory"][-1]["trial"]]
    checked = fitted.user_attrs["parity"]
    assert checked["stock_trial"] == 0 and checked["reference"]["kind"] == "stock"
    assert isinstance(checked["passed"], bool)
    reference = json.loads((out / "diagnosis.json").read_text())["parity_reference"]
    assert reference["kind"] == "stock" and "over" in reference["text"]
    assert build_report(out).summary.parity_reference == reference["text"]
