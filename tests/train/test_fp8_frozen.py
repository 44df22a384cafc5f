"""``precision.regions.R: fp8`` on frozen layers: the weight is cast to fp8 once, at conversion.

Runs on a CPU (torch 2.13 has a CPU ``_scaled_mm``): which layers get a static fp8 weight, that a
step reads that copy and never casts the weight again, that the numerics are the per-step cast's
bit for bit, and that loading weights refreshes the copy in place. Compile and CUDA-graph capture:
``tests/train/test_gpu_fp8_frozen.py``.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torchao.float8")

from torchao.float8.float8_linear import Float8Linear  # noqa: E402

from autotune.config import PrecisionConfig  # noqa: E402
from autotune.train.fp8_static import FrozenFloat8Linear  # noqa: E402
from autotune.train.precision import (  # noqa: E402
    apply_precision,
    convert_fp8_layers,
    refresh_frozen_fp8,
)
from autotune.workloads import get_workload  # noqa: E402

W = get_workload("gr00t_n17")
FP8 = {"vision": "fp8", "llm_frozen": "fp8", "dit": "fp8"}


def _model(static: bool = True):
    """Tiny N1.7 with the vision tower, the frozen text layers and the DiT in fp8 (bf16 elsewhere);
    ``static=False``: every layer keeps torchao's per-step cast (the path before this one)."""
    torch.manual_seed(0)
    model = W.build_model("tiny", "cpu")
    regions = model.region_map()
    cfg = PrecisionConfig(regions=FP8)
    if static:
        apply_precision(regions, cfg, torch.device("cpu"), graphs=False)
    else:
        from autotune.train import precision

        precision.set_param_dtypes(regions, cfg)
        for name in FP8:
            for module in regions[name]:
                convert_fp8_layers(module)
        for name, modules in regions.items():
            for module in modules:
                precision._wrap_forward(module, "cpu", precision.autocast_dtype(cfg.of(name)), True)
    return model


def _loss_and_grads(model, seed: int = 3):
    batch = W.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(1))
    torch.manual_seed(seed)
    loss = W.loss(model, batch)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads


def test_frozen_layers_get_a_static_fp8_weight_and_trained_ones_keep_the_per_step_cast():
    model = _model()
    vision = [m for m in model.vision.modules() if isinstance(m, Float8Linear)]
    text = [m for m in model.llm_frozen.modules() if isinstance(m, Float8Linear)]
    dit = [m for m in model.dit.modules() if isinstance(m, Float8Linear)]
    assert vision and text and dit
    assert all(type(m) is FrozenFloat8Linear for m in vision + text)
    assert all(type(m) is Float8Linear for m in dit)  # the DiT trains: its weights change each step
    layer = vision[0]
    assert layer.fp8_weight_t._data.dtype == torch.float8_e4m3fn
    assert layer.weight.dtype == torch.bfloat16  # the weight itself stays, in the frozen dtype
    assert "fp8_weight_t" not in str(model.state_dict().keys())  # not saved


def test_the_static_weight_gives_the_per_step_casts_loss_and_gradients_bit_for_bit():
    ref_loss, ref = _loss_and_grads(_model(static=False))
    loss, grads = _loss_and_grads(_model())
    assert torch.equal(loss, ref_loss)
    assert grads.keys() == ref.keys()
    for name in ref:
        assert torch.equal(grads[name], ref[name]), name


def test_steps_read_the_fp8_copy_and_never_cast_the_weight_again():
    """Two steps keep the same fp8 tensor at the same address; the step reads it (zeroing it changes
    the loss) and not the weight (changing the weight without a refresh changes nothing)."""
    model = _model()
    layer = model.vision.blocks[0].linear_fc1
    assert type(layer) is FrozenFloat8Linear
    w8, ptr = layer.fp8_weight_t, layer.fp8_weight_t._data.data_ptr()
    first, _ = _loss_and_grads(model)
    again, _ = _loss_and_grads(model)
    assert layer.fp8_weight_t is w8 and w8._data.data_ptr() == ptr and torch.equal(first, again)
    with torch.no_grad():
        layer.weight.mul_(3.0)
    unchanged, _ = _loss_and_grads(model)
    assert torch.equal(unchanged, first)  # no cast of the changed weight in the step
    refresh_frozen_fp8(model)  # as Session.weights_loaded does after --init-from
    assert layer.fp8_weight_t is w8 and w8._data.data_ptr() == ptr
    refreshed, _ = _loss_and_grads(model)
    assert not torch.equal(refreshed, first)
    assert torch.equal(w8._data.float(), layer.cast_weight()._data.float())
    with torch.no_grad():
        w8._data.zero_()
    zeroed, _ = _loss_and_grads(model)
    assert not torch.equal(zeroed, refreshed)


def _stack(plain: bool = True, trains_after: bool = False) -> torch.nn.Module:
    """Two frozen fp8 layers in a bf16 autocast region (as a precision region wraps them), then,
    with ``trains_after``, a trained linear layer (a graph with a backward)."""
    torch.manual_seed(0)
    frozen = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64)
    ).to(torch.bfloat16)
    frozen.requires_grad_(False)
    apply_precision(
        {"f": [frozen]}, PrecisionConfig(default="fp8"), torch.device("cpu"), graphs=False
    )
    for layer in frozen.modules():
        if isinstance(layer, FrozenFloat8Linear):
            layer._plain = layer._plain and plain
    if not trains_after:
        return frozen
    head = torch.nn.Linear(64, 8).to(torch.bfloat16)
    return torch.nn.Sequential(frozen, head)


def _input(requires_grad: bool = False) -> torch.Tensor:
    x = torch.randn(4, 40, 64, generator=torch.Generator().manual_seed(2)) * 3
    return x.to(torch.bfloat16).requires_grad_(requires_grad)


def test_the_plain_forward_is_torchaos_forward_bit_for_bit_eager_and_compiled():
    plain, torchao_path = _stack(), _stack(plain=False)
    assert all(m._plain for m in plain.modules() if isinstance(m, FrozenFloat8Linear))
    x = _input()
    assert torch.equal(plain(x), torchao_path(x))
    torch._dynamo.reset()
    assert torch.equal(torch.compile(plain)(x), torch.compile(torchao_path)(x))


def test_a_frozen_layer_whose_input_needs_a_gradient_gives_torchaos_gradient():
    layer = _stack()
    ref = _stack(plain=False)
    x, x_ref = _input(requires_grad=True), _input(requires_grad=True)
    layer(x).float().square().sum().backward()
    ref(x_ref).float().square().sum().backward()
    assert x.grad is not None and torch.equal(x.grad, x_ref.grad)


def _aot_counts(model: torch.nn.Module, cache: str, monkeypatch) -> dict:
    """AOTAutograd's cache counters for one compile of ``model``'s forward and backward, in a fresh
    Dynamo state, with ``cache`` as the cache folder."""
    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", cache)
    torch._dynamo.reset()
    counters.clear()
    torch.compile(model)(_input()).float().sum().backward()
    return dict(counters["aot_autograd"])


def test_a_compiled_graph_of_frozen_fp8_layers_is_cached_and_loaded_by_aot_autograd(
    tmp_path, monkeypatch, torch_config
):
    """A second process (here: a fresh Dynamo state) loads the graph AOTAutograd saved instead of
    tracing and partitioning it again; torchao's own path is refused by the cache."""
    import torch._functorch.config
    import torch._inductor.config

    from autotune.train.compile_cache import cache_autocast_graphs

    torch_config(torch._functorch.config, enable_autograd_cache=True)
    torch_config(torch._inductor.config, fx_graph_cache=True, unsafe_marked_cacheable_functions={})
    cache_autocast_graphs()
    first = _aot_counts(_stack(trains_after=True), str(tmp_path / "a"), monkeypatch)
    assert first.get("autograd_cache_saved", 0) >= 1 and not first.get("autograd_cache_bypass"), (
        first
    )
    again = _aot_counts(_stack(trains_after=True), str(tmp_path / "a"), monkeypatch)
    assert again.get("autograd_cache_hit", 0) >= 1 and not again.get("autograd_cache_miss"), again
    refused = _aot_counts(_stack(plain=False, trains_after=True), str(tmp_path / "b"), monkeypatch)
    assert refused.get("autograd_cache_bypass", 0) >= 1, refused
