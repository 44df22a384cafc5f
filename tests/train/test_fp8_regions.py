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
    per_sample = {
        n
        for n in kinds
        if n.endswith("norm1.linear") or n.startswith(("timestep_encoder.", "proj_out_1"))
    }
    assert per_sample and all(kinds[n] is nn.Linear for n in per_sample)
    assert all(
        kinds[n] is Float8Linear for n in kinds if n not in per_sample
    )  # q/k/v/out, FFN, proj_out_2
    batch = W.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(batch)
    loss.backward()
    assert torch.isfinite(loss) and model.dit.blocks[0].ff_in.weight.grad is not None


def test_misaligned_layers_stay_in_bf16():
    assert (
        fp8_eligible(nn.Linear(32, 64))
        and not fp8_eligible(nn.Linear(30, 64))
        and not fp8_eligible(nn.LayerNorm(32))
    )


def test_an_fp8_vision_mlp_with_its_bias_in_the_activation_still_runs_its_fc1_in_fp8():
    """model.bias_in_activation computes a plain fc1 without its bias; converted to fp8 the layer's own
    forward runs (it adds the bias after its GEMM), so the tower's largest GEMM is not left in bf16."""
    from autotune.config import ModelConfig
    from autotune.workloads.gr00t_n16.knobs import Gr00tModelKnobs

    model = W.build_model("tiny", "cpu")
    W.apply_model_options(model, ModelConfig(options=Gr00tModelKnobs(bias_in_activation=True)))
    _convert_fp8(model.region_map()["vision"])
    layer = model.vision.blocks[0]
    assert isinstance(layer.fc1, Float8Linear)
    calls = []
    layer.fc1.register_forward_hook(lambda *_: calls.append(1))
    x = torch.randn(2, 8, layer.fc1.in_features)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x)
    assert calls == [1] and torch.isfinite(out).all()


def test_fp8_projections_are_not_fused_and_still_run():
    """model.fused_frozen_qkv copies plain frozen projections only: the vision tower's q/k/v converted to
    fp8 keep their own GEMMs, and those converted layers (not the ones they replaced) are what runs."""
    from autotune.config import ModelConfig
    from autotune.workloads.gr00t_n16.knobs import Gr00tModelKnobs

    model = W.build_model("tiny", "cpu")
    W.apply_model_options(model, ModelConfig(options=Gr00tModelKnobs(fused_frozen_qkv=True)))
    _convert_fp8(model.region_map()["vision"])
    W.prepare_model(model)
    attn = model.vision.blocks[0].self_attn
    assert isinstance(attn.q_proj, Float8Linear) and attn.qkv.weight is None
    assert model.llm_frozen.blocks[0].self_attn.qkv.weight is not None  # the bf16 tower still fuses
    calls = []
    attn.q_proj.register_forward_hook(lambda *_: calls.append(1))
    batch = W.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(batch)
    assert calls


def test_a_trained_fp8_layer_pads_its_gemms_and_a_frozen_one_does_not():
    """A trained layer's weight gradient sums over batch × tokens rows (tiny N1.7 at batch 4: 164),
    which fp8 GEMMs need in multiples of 16: torchao pads them. A frozen layer has no weight
    gradient and keeps its operands unpadded (padding copies them)."""
    from autotune.train.precision import convert_fp8_layers

    model = nn.Sequential(nn.Linear(32, 64), nn.Linear(64, 32))
    model[0].requires_grad_(False)
    convert_fp8_layers(model)
    assert [type(m) for m in model] == [Float8Linear, Float8Linear]
    assert [m.config.pad_inner_dim for m in model] == [False, True]
    n17 = get_workload("gr00t_n17")
    tiny = n17.build_model("tiny", "cpu")
    convert_fp8_layers(tiny.dit)
    batch = n17.synthetic_batch("tiny", 4, "cpu", torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = tiny(batch)
    loss.backward()
    assert torch.isfinite(loss)


@pytest.mark.parametrize("region", ["vlln", "projectors"])
def test_fp8_named_for_a_region_without_a_layer_it_takes_is_refused(region):
    """N1.7's ``vlln`` (a LayerNorm) and ``projectors`` (per-embodiment weights, no nn.Linear) have no
    layer fp8 converts: named there it is refused, not run in bf16 under the name of fp8."""
    from autotune.config import PrecisionConfig
    from autotune.errors import IncompatibleConfigError
    from autotune.train.precision import apply_precision

    n17 = get_workload("gr00t_n17")
    regions = n17.regions(n17.build_model("tiny", "cpu"))
    cfg = PrecisionConfig(regions={region: "fp8"})
    with pytest.raises(
        IncompatibleConfigError,
        match=rf"precision.regions.{region}: refused: region '{region}' has no linear layer fp8 "
        r"takes \(widths multiples of 16\)",
    ):
        apply_precision(regions, cfg, torch.device("cpu"), graphs=False)
