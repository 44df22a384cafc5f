"""GPU-only: fp8 frozen layers with their weights cast once (``autotune.train.fp8_static``) on the device:
the same loss and gradients as torchao's per-step cast, eager and compiled, and a captured CUDA graph or
a ``reduce-overhead`` compile that reads the fp8 copy (refreshed in place) rather than a copy of it.

    python -m pytest -q tests/train/test_gpu_fp8_frozen.py   # on a GPU of compute capability >= 8.9
"""

from __future__ import annotations

import pytest
import torch
import torch._inductor.config

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
    reason="needs a CUDA device with fp8 (compute capability >= 8.9)",
)

from autotune.config import PrecisionConfig  # noqa: E402
from autotune.train import precision  # noqa: E402
from autotune.train.fp8_static import FrozenFloat8Linear  # noqa: E402
from autotune.workloads import get_workload  # noqa: E402

W = get_workload("gr00t_n17")
FP8 = {"vision": "fp8", "connector": "fp8", "llm_frozen": "fp8", "dit": "fp8"}
CUDA = torch.device("cuda")


def _model(static: bool = True, fp8: dict[str, str] = FP8, scaling: str = "tensorwise"):
    """Tiny N1.7 on the GPU, its backbone and DiT in fp8; ``static=False``: torchao's per-step cast;
    ``scaling``: how the frozen layers scale (``precision.fp8_frozen_scaling``)."""
    torch.manual_seed(0)
    model = W.build_model("tiny", CUDA)
    regions = model.region_map()
    cfg = PrecisionConfig(regions=fp8, fp8_frozen_scaling=scaling)
    if static:
        precision.apply_precision(regions, cfg, CUDA, graphs=True)
        return model
    precision.set_param_dtypes(regions, cfg)
    for name in fp8:
        for module in regions[name]:
            precision.convert_fp8_layers(module)
    for name, modules in regions.items():
        for module in modules:
            dtype = precision.autocast_dtype(cfg.of(name))
            precision._wrap_forward(module, "cuda", dtype, cache=False)
    return model


def _batch():
    batch = W.synthetic_batch("tiny", 4, "cpu", torch.Generator().manual_seed(1))
    return {k: v.to(CUDA) for k, v in batch.items()}


def _loss_and_grads(model, batch, seed: int = 3):
    torch.manual_seed(seed)
    loss = W.loss(model, batch)
    loss.backward()
    grads = {n: p.grad.float().clone() for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad(set_to_none=True)
    return loss.detach().float(), grads


def _prefix(model, batch):
    with torch.no_grad():
        return model.frozen_prefix(batch)


def _apart(a: dict, b: dict) -> float:
    """The largest relative distance between two sets of gradients, tensor by tensor."""
    return max(float((a[n] - b[n]).norm() / b[n].norm().clamp_min(1e-12)) for n in b)


@pytest.mark.parametrize("compiled", [False, True])
def test_the_static_weight_gives_the_per_step_casts_prefix_loss_and_gradients(
    compiled, torch_config
):
    batch = _batch()
    ref_model, model = _model(static=False), _model()
    assert any(type(m) is FrozenFloat8Linear for m in model.modules())
    # the frozen prefix: the same fp8 weights in the same GEMMs
    torch.testing.assert_close(_prefix(model, batch), _prefix(ref_model, batch), rtol=0, atol=0)
    ref_loss, ref = _loss_and_grads(ref_model, batch)
    again_loss, again = _loss_and_grads(ref_model, batch)
    if compiled:
        # compiled graphs draw Inductor's own random numbers, in an order their graph breaks decide;
        # eager's, drawn as eager draws them, make two compiled models see the same noise
        torch_config(torch._inductor.config, fallback_random=True)
        ref_model.compile()
        model.compile()
        # the per-step cast compiled: Inductor fuses the scaling and rounds otherwise than eager
        again_loss, again = _loss_and_grads(ref_model, batch)
    loss, grads = _loss_and_grads(model, batch)
    # the backward's atomics differ from run to run (and a compile rounds otherwise), and the DiT's
    # per-step fp8 casts round such a one-ulp difference to a whole fp8 step: the static weight is
    # held to the per-step cast's own spread (eager again, or compiled, against eager)
    spread = _apart(again, ref)
    assert _apart(grads, ref) <= 3 * spread + 1e-3, (spread, _apart(grads, ref))
    assert abs(float(loss - ref_loss)) <= 3 * abs(float(again_loss - ref_loss)) + 1e-3 * abs(
        float(ref_loss)
    )


def _captured_prefix(model, batch) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """The frozen prefix captured in a CUDA graph (after two warm-up runs on a side stream) and its
    output tensor, which each replay writes."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            _prefix(model, batch)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _prefix(model, batch)
    return graph, out


def test_a_captured_prefix_reads_the_fp8_copy_refreshed_in_place():
    model, batch = _model(), _batch()
    eager = _prefix(model, batch)
    graph, out = _captured_prefix(model, batch)
    graph.replay()
    torch.testing.assert_close(out, eager)
    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, FrozenFloat8Linear):
                layer.weight.mul_(0.5)
    precision.refresh_frozen_fp8(model)  # as Session.weights_loaded does
    graph.replay()
    changed = _prefix(model, batch)
    assert not torch.equal(changed, eager)
    torch.testing.assert_close(out, changed)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def test_a_reduce_overhead_compile_of_the_prefix_reads_the_fp8_copy_refreshed_in_place():
    model, batch = _model(), _batch()
    eager = _prefix(model, batch)
    prefix = torch.compile(model.frozen_prefix, mode="reduce-overhead")
    for _ in range(3):
        with torch.no_grad():
            out = prefix(batch).clone()
    # Inductor scales the activations in fused kernels that round otherwise than eager's; one e4m3
    # step is 1/16 to 1/8 of a value, so a rounding that differs in one layer moves the next layer's
    # fp8 inputs by whole steps (tiny N1.7 on an H200: 4.9 % over the prefix)
    assert _rel(out, eager) < 0.1
    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, FrozenFloat8Linear):
                layer.weight.mul_(0.5)
    precision.refresh_frozen_fp8(model)  # as Session.weights_loaded does
    changed = _prefix(model, batch)
    with torch.no_grad():
        again = prefix(batch).clone()
    # the replay follows the refreshed weights: nearer the new eager prefix than the old one
    assert _rel(again, changed) < _rel(again, eager), (_rel(again, changed), _rel(again, eager))


def _cache_counts(monkeypatch, folder) -> dict:
    """AOTAutograd's cache counters for one compiled step of a new tiny N1.7 (backbone in fp8, the
    frozen prefix under no_grad as the session runs it; the DiT, which trains, in bf16: torchao's
    fp8 training layers are not cacheable), in a fresh Dynamo state."""
    from torch._dynamo.utils import counters

    from autotune.train.compile_cache import cache_env

    for key, value in cache_env(folder, keep_user=False).items():
        monkeypatch.setenv(key, value)
    torch._dynamo.reset()
    counters.clear()
    model, batch = _model(fp8={k: v for k, v in FP8.items() if k != "dit"}), _batch()
    prefix = torch.compile(model.frozen_prefix)
    with torch.no_grad():
        prefix(batch)
    model.compile()
    _loss_and_grads(model, batch)
    return dict(counters["aot_autograd"])


def test_compiled_frozen_fp8_graphs_are_loaded_from_aot_autograds_cache(
    tmp_path, monkeypatch, torch_config
):
    from autotune.train.compile_cache import cache_autocast_graphs

    torch_config(torch._inductor.config, unsafe_marked_cacheable_functions={})
    cache_autocast_graphs()
    first = _cache_counts(monkeypatch, tmp_path)
    assert not first.get("autograd_cache_bypass") and first.get("autograd_cache_saved"), first
    again = _cache_counts(monkeypatch, tmp_path)
    assert again.get("autograd_cache_hit") and not again.get("autograd_cache_miss"), again
    assert not again.get("autograd_cache_bypass"), again


@pytest.mark.parametrize("compiled", [False, True])
def test_rowwise_frozen_layers_give_the_tensorwise_prefix_to_fp8_rounding(compiled):
    """``precision.fp8_frozen_scaling: rowwise`` on the GPU's ``_scaled_mm`` (row and column scales):
    the frozen prefix within fp8's rounding of the tensorwise one's, eager and compiled, and a
    captured replay reads the rowwise copy refreshed in place."""
    batch = _batch()
    tensorwise, rowwise = _model(), _model(scaling="rowwise")
    assert all(m._rowwise for m in rowwise.modules() if isinstance(m, FrozenFloat8Linear))
    want = _prefix(tensorwise, batch)
    prefix = torch.compile(rowwise.frozen_prefix) if compiled else rowwise.frozen_prefix
    with torch.no_grad():
        got = prefix(batch)
    assert _rel(got, want) < 0.1, _rel(got, want)
    assert _rel(got, _prefix(_model(fp8={}), batch)) < 0.1  # and near bf16's
    graph, out = _captured_prefix(rowwise, batch)
    with torch.no_grad():
        for layer in rowwise.modules():
            if isinstance(layer, FrozenFloat8Linear):
                layer.weight.mul_(0.5)
    precision.refresh_frozen_fp8(rowwise)
    graph.replay()
    torch.testing.assert_close(out, _prefix(rowwise, batch))
