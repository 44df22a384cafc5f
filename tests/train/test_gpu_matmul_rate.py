"""GPU-only: the matmul rate MFU is measured against is the same figure from one measurement to the next.

python -m pytest -q tests/train/test_gpu_matmul_rate.py
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

from autotune.train.window.measure import matmul_rate  # noqa: E402


def test_two_measurements_of_the_matmul_rate_agree():
    device = torch.device("cuda")
    first, second = matmul_rate(device), matmul_rate(device)
    # an MFU is only as steady as its denominator: a 10 % swing would read as 5 points of MFU at 50 %
    assert abs(first - second) / max(first, second) < 0.05, (first, second)
