"""GPU-only: stock out of memory under a budget emulated below the device's memory is run once more
without the cap, and its losses are the loss-parity reference (``autotune.search.vet``). Run on the
device machine:

    python -m pytest -q tests/search/test_gpu_parity_reference.py
"""

from __future__ import annotations

import json

import optuna
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

from autotune.cli import main  # noqa: E402
from autotune.config import config_from_dict  # noqa: E402
from autotune.search.trials import UNCAPPED, reason_of  # noqa: E402
from autotune.search.vet import parity_reference  # noqa: E402
from autotune.train.trial.launch import launch  # noqa: E402
from autotune.train.window.verify import compare, tolerance_for  # noqa: E402
from tests.studies import journal  # noqa: E402

BUDGET = 64 * 2**20
"""Below the CUDA context alone: every run under the cap is out of memory, the device holds stock."""


def test_stock_out_of_memory_under_an_emulated_budget_gives_its_losses_without_the_cap(tmp_path):
    out = tmp_path / "run"
    argv = "run --preset tiny --synthetic --batch-size 2 --trials 1 --steps 2 --warmup 1"
    argv += f" --confirm-rounds 0 --no-prune --profile-steps 0 --memory-budget {BUDGET}"
    main([*argv.split(), "--out", str(out)])  # exits non-zero: no trial fits 64 MiB
    study = optuna.load_study(study_name=None, storage=journal(out))
    stock = study.trials[0]
    assert reason_of(stock) == "oom"  # the cap refused it
    uncapped = stock.user_attrs[UNCAPPED]
    assert len(uncapped.get("losses") or []) == 3, uncapped  # warm-up and measured steps
    reference = json.loads((out / "diagnosis.json").read_text())["parity_reference"]
    assert reference["kind"] == "uncapped"
    assert reference["text"] == "stock without the memory cap (it does not fit 0.0625 GiB)"

    # stock run again without a cap trains what the reference holds
    cfg = config_from_dict({"preset": "tiny", "batch_size": 2, "data": {"source": "synthetic"}})
    again = launch(cfg, steps=2, warmup=1, timeout=300, log_path=tmp_path / "again.log")
    assert again.failure is None, again.failure
    result = compare(parity_reference(study), again.measurement, tolerance_for(cfg))
    assert result.passed, result
