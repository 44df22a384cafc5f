"""GPU-only: low-bit optimizer states through torchao's compiled update, and AdamW's state in host
memory (``optimizer.offload``, which needs CUDA): the offloaded update is torch's fused AdamW with
clipping to float rounding, with accumulation too, and a resumed offloaded session continues from
the loaded weights. Run on the device machine:

    python -m pytest -q tests/train/test_gpu_lowbit.py
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
pytest.importorskip("torchao.optim")

from autotune.config import OptimizerConfig  # noqa: E402
from autotune.train.job import state  # noqa: E402
from autotune.train.optim import adamw as optim  # noqa: E402
from autotune.train.session import Session  # noqa: E402
from tests.train.test_train_cpu import tiny  # noqa: E402


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(  # tensors over and under torchao's 4096-value threshold
        torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 64), torch.nn.LayerNorm(64)
    ).cuda()


def _train(cfg: OptimizerConfig, steps: int = 6, micro: int = 1) -> list[torch.Tensor]:
    """``steps`` clipped updates (the odd steps' gradients large enough to clip), ``micro`` backwards each."""
    model = _model()
    groups = [{"params": list(model.parameters()), "weight_decay": 0.01}]
    opt = optim.build_optimizer(groups, cfg, capturable=False)
    schedule = optim.build_schedule(opt, cfg)
    gen = torch.Generator(device="cuda").manual_seed(1)
    for i in range(steps):
        for _ in range(micro):
            x = torch.randn(32, 256, device="cuda", generator=gen)
            ((model(x) ** 2).mean() * (30.0 if i % 2 else 0.01) / micro).backward()
        optim.clip_and_step(opt, list(model.parameters()), cfg.grad_clip)
        opt.zero_grad(set_to_none=True)
        schedule.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("micro", [1, 3])
def test_the_offloaded_update_is_fused_adamw_with_clipping(micro):
    kw = {"impl": "fused", "lr": 1e-2, "total_steps": 10, "grad_clip": 1.0}
    want = _train(OptimizerConfig(**kw), micro=micro)
    got = _train(OptimizerConfig(**kw, offload=True), micro=micro)
    start = _train(OptimizerConfig(**kw), 0)
    moved = sum((w - a).norm() for w, a in zip(want, start))
    apart = sum((g - w).norm() for g, w in zip(got, want))
    # the host's fused AdamW rounds otherwise than the device's, and AdamW magnifies that where a
    # gradient is near zero; a lost clip or weight decay moves the weights several times this far
    assert apart < 5e-4 * moved


@pytest.mark.parametrize("impl", ["adamw8bit", "adamw4bit"])
def test_the_compiled_low_bit_update_trains_close_to_fused_adamw(impl):
    kw = {"lr": 1e-3, "total_steps": 10}
    want = _train(OptimizerConfig(impl="fused", **kw))
    got = _train(OptimizerConfig(impl=impl, **kw))
    moved = sum(
        (w - a).norm() for w, a in zip(want, _train(OptimizerConfig(impl="fused", **kw), 0))
    )
    apart = sum((g - w).norm() for g, w in zip(got, want))
    # not the same numbers; the quantized moments' error stays well under the updates themselves
    assert 0 < apart < 0.3 * moved


@pytest.mark.parametrize(
    "over",
    [
        {"optimizer__impl": "adamw8bit"},
        {"optimizer__impl": "adamw8bit", "graphs__mode": "step", "graphs__warmup_steps": 1},
        {"optimizer__impl": "fused", "optimizer__offload": True},
    ],
)
def test_a_session_resumes_from_its_captured_state_step_for_step(over):
    cfg = tiny(**over)
    cfg.device = "cuda"
    s = Session(cfg)
    batches = [
        s.workload.synthetic_batch("tiny", 2, s.device, torch.Generator().manual_seed(i))
        for i in range(4)
    ]
    for b in batches[:2]:
        s.step(b)
    weights, opt = state.capture(s, state.HostBuffers(s.device))
    weights = {k: v.clone() for k, v in weights.items()}
    schedule, rng = state.schedule_to_host(s), state.rng_state(s.device)
    want = [float(s.step(b)[0]) for b in batches[2:]]
    again = Session(cfg)
    again.step(batches[0])  # other weights and state, overwritten by the checkpoint's
    state.load_weights(again, weights, "test")
    state.load_optimizer(again, opt)
    state.load_schedule(again, schedule)
    state.set_rng_state(rng, again.device)
    assert [float(again.step(b)[0]) for b in batches[2:]] == want


@pytest.mark.parametrize("impl", ["adamw8bit", "adamw4bit"])
def test_a_captured_low_bit_update_replays_each_steps_rate_and_bias_correction(impl):
    """The update captured once and replayed gives the eager updates: each replay counts its step
    and reads the rate the schedule set (cosine over 10 steps: the rate moves every step)."""
    cfg = OptimizerConfig(impl=impl, lr=1e-2, total_steps=10, warmup_ratio=0.0)
    gen = torch.Generator(device="cuda").manual_seed(3)
    shapes = [p.shape for p in _model().parameters()]
    grads = [[torch.randn(s, device="cuda", generator=gen) for s in shapes] for _ in range(8)]

    def run(capturable: bool) -> tuple[list[torch.Tensor], torch.optim.Optimizer]:
        model = _model()
        params = list(model.parameters())
        opt = optim.build_optimizer([{"params": params}], cfg, capturable=capturable)
        schedule = optim.build_schedule(opt, cfg)
        for p, g in zip(params, grads[0]):
            p.grad = g.clone()
        graph = None
        for i, step_grads in enumerate(grads):
            for p, g in zip(params, step_grads):
                p.grad.copy_(g)
            if not capturable or i < 3:
                opt.step()  # eager warm-up: torchao compiles its update here
            else:
                if graph is None:
                    torch.cuda.synchronize()
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        opt.step()
                graph.replay()
            schedule.step()
        torch.cuda.synchronize()
        return [p.detach().clone() for p in params], opt

    want, _ = run(False)
    got, opt = run(True)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    steps = {float(s["step"]) for s in opt.state.values()}
    assert steps == {float(len(grads))}
