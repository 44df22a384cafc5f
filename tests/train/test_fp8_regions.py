"""``precision: fp8`` per region: which linear layers torchao's float8 training takes over.

The conversion itself runs on a CPU (torchao's Float8Linear; torch 2.13 has a CPU ``_scaled_mm``),
so the choice of layers is checked here; whether fp8 pays is the GPU suite's to measure.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("torchao.float8")

from torchao.float8.float8_linear import Float8Linear  # noqa: E402

from autotune.train.precision import _convert_fp8, fp8_eligible  # noqa: E402
from autotune.workloads import get_workload  # noqa: E402

W = get_workload("gr00t_n16")


def test_fp8_takes_the_dit_gemms_but_not_the_per_sample_timestep_layers():
    model = W.build_model("tiny", "cpu")
    dit = model.region_map()["dit"]
    _convert_fp8(dit)
    kinds = {name: type(m) for name, m in model.dit.named_modules() if isinstance(m, nn.Linear)}
    per_sample = {n for n in kinds if n.endswith("norm1.linear") or n.startswith(("timestep_encoder.", "proj_out_1"))}
    assert per_sample and all(kinds[n] is nn.Linear for n in per_sample)
    assert all(kinds[n] is Float8Linear for n in kinds if n not in per_sample)  # q/k/v/out, FFN, proj_out_2
    batch = W.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(batch)
    loss.backward()
    assert torch.isfinite(loss) and model.dit.blocks[0].ff_in.weight.grad is not None


def test_misaligned_layers_stay_in_bf16():
    assert fp8_eligible(nn.Linear(32, 64)) and not fp8_eligible(nn.Linear(30, 64)) and not fp8_eligible(nn.LayerNorm(32))
