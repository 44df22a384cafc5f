"""``precision.fp8_frozen_scaling: rowwise``: frozen fp8 layers scale each activation row and each
output channel of the weight on their own (CPU: torch 2.13 has a CPU ``_scaled_mm`` that takes
row and column scales; on the GPU: ``tests/train/test_gpu_fp8_frozen.py``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("torchao.float8")

from autotune.config import PrecisionConfig, config_from_dict  # noqa: E402
from autotune.errors import ConfigError  # noqa: E402
from autotune.train.fp8_static import FrozenFloat8Linear  # noqa: E402
from autotune.train.precision import apply_precision, refresh_frozen_fp8  # noqa: E402
from autotune.workloads import get_workload  # noqa: E402

W = get_workload("gr00t_n17")
E4M3_MAX = float(torch.finfo(torch.float8_e4m3fn).max)


def _layer(scaling: str, d_in: int = 256, d_out: int = 128) -> nn.Module:
    """One frozen bf16 linear layer in an fp8 region, converted as a session converts it."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(d_in, d_out)).requires_grad_(False)
    cfg = PrecisionConfig(regions={"r": "fp8"}, fp8_frozen_scaling=scaling)
    apply_precision({"r": [net]}, cfg, torch.device("cpu"), graphs=False)
    return net


def _input(rows: int = 64, d_in: int = 256, outlier: float = 1.0) -> torch.Tensor:
    x = torch.randn(2, rows // 2, d_in, generator=torch.Generator().manual_seed(1))
    x[0, 0] *= outlier  # one token far louder than the others
    return x.to(torch.bfloat16)


def _pow2(amax: torch.Tensor) -> torch.Tensor:
    return torch.exp2(torch.floor(torch.log2(E4M3_MAX / amax.float())))


def test_the_rowwise_gemm_is_the_product_of_the_rows_and_channels_dequantized():
    """Each activation row and each weight channel cast with its own power-of-2 scale: the output is
    the fp32 product of the dequantized operands, to the bf16 rounding of the output."""
    net = _layer("rowwise")
    layer = net[0]
    assert type(layer) is FrozenFloat8Linear and layer._rowwise and layer.fp8_weight_t is None
    x = _input()
    w = layer.weight.float()
    ws = _pow2(w.abs().amax(dim=1, keepdim=True))
    w_dq = (w * ws).to(torch.float8_e4m3fn).float() / ws
    flat = x.reshape(-1, x.shape[-1]).float()
    xs = _pow2(flat.abs().amax(dim=1, keepdim=True))
    x_dq = (flat * xs).to(torch.float8_e4m3fn).float() / xs
    want = x_dq @ w_dq.t() + layer.bias.float()
    got = net(x)
    assert got.dtype == torch.bfloat16 and got.shape == (2, 32, 128)
    torch.testing.assert_close(got.float().reshape(-1, 128), want, rtol=1e-2, atol=1e-2)


def test_a_loud_token_costs_only_its_own_row_rowwise():
    """With one token 1e5x louder, tensorwise scaling pushes every other row into fp8's subnormals;
    rowwise keeps them as close to bf16 as without the outlier."""
    x = _input(outlier=1e5)
    ref = nn.functional.linear(x.float(), _layer("rowwise")[0].weight.float())
    errors = {}
    for scaling in ("tensorwise", "rowwise"):
        layer = _layer(scaling)[0]
        out = (layer(x).float() - layer.bias.float())[1]  # the rows without the outlier
        errors[scaling] = ((out - ref[1]).norm() / ref[1].norm()).item()
    assert errors["rowwise"] < 0.1, errors
    assert errors["tensorwise"] > 5 * errors["rowwise"], errors


def test_compiled_the_rowwise_layer_computes_as_eager():
    net = _layer("rowwise")
    x = _input()
    want = net(x)
    got = torch.compile(net, backend="inductor")(x)
    torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2)


def test_a_call_whose_input_needs_a_gradient_runs_in_bf16_with_the_weight():
    """No fp8 backward is kept for a frozen layer: such a call is bf16's, gradient included."""
    layer = _layer("rowwise")[0]
    x = _input().float().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x)
    out.float().sum().backward()
    xb = x.detach().to(torch.bfloat16).requires_grad_(True)
    want = nn.functional.linear(xb, layer.weight) + layer.bias
    want.float().sum().backward()
    assert torch.equal(out, want)
    torch.testing.assert_close(x.grad, xb.grad.float())


def test_loaded_weights_refresh_the_rowwise_copy_in_place():
    net = _layer("rowwise")
    layer = net[0]
    data, inv = layer.rowwise_weight_t, layer.rowwise_inv_scale
    ptrs = (data.data_ptr(), inv.data_ptr())
    x = _input()
    before = net(x)
    with torch.no_grad():
        layer.weight.mul_(4.0)
    assert torch.equal(net(x), before)  # the step reads the copy, not the weight
    refresh_frozen_fp8(net)
    assert (layer.rowwise_weight_t.data_ptr(), layer.rowwise_inv_scale.data_ptr()) == ptrs
    after = net(x)
    assert not torch.equal(after, before)
    torch.testing.assert_close((after - layer.bias).float(), 4 * (before - layer.bias).float(),
                               rtol=2e-2, atol=2e-2)  # fmt: skip
    assert "rowwise" not in str(net.state_dict().keys())  # the copies are not saved


def test_the_replica_trains_with_rowwise_frozen_layers_and_trained_ones_keep_tensorwise():
    """N1.7's tiny preset, vision, text layers and DiT in fp8, rowwise: the frozen layers scale by rows,
    the DiT's (trained) keep torchao's tensorwise training; the loss is close to tensorwise's."""
    from torchao.float8.float8_linear import Float8Linear

    losses = {}
    for scaling in ("tensorwise", "rowwise"):
        torch.manual_seed(0)
        model = W.build_model("tiny", "cpu")
        cfg = PrecisionConfig(
            regions={"vision": "fp8", "llm_frozen": "fp8", "dit": "fp8"},
            fp8_frozen_scaling=scaling,
        )
        apply_precision(model.region_map(), cfg, torch.device("cpu"), graphs=False)
        frozen = [m for m in model.llm_frozen.modules() if isinstance(m, FrozenFloat8Linear)]
        trained = [m for m in model.dit.modules() if isinstance(m, Float8Linear)]
        assert frozen and trained and all(m._rowwise == (scaling == "rowwise") for m in frozen)
        assert not any(isinstance(m, FrozenFloat8Linear) for m in trained)
        batch = W.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(1))
        torch.manual_seed(3)
        loss = W.loss(model, batch)
        loss.backward()
        losses[scaling] = loss.item()
    assert losses["rowwise"] == pytest.approx(losses["tensorwise"], rel=0.05)


def test_the_knob_is_a_precision_knob_that_changes_numerics():
    from autotune.config import TrainConfig
    from autotune.config.knob import numerics_of

    cfg = config_from_dict({"precision": {"fp8_frozen_scaling": "rowwise"}})
    assert cfg.precision.fp8_frozen_scaling == "rowwise"
    assert "precision.fp8_frozen_scaling" in numerics_of(TrainConfig, cfg)
    with pytest.raises(ConfigError, match=r"precision.fp8_frozen_scaling: 'colwise' .*tensorwise"):
        config_from_dict({"precision": {"fp8_frozen_scaling": "colwise"}})
