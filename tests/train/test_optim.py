"""The optimizer implementations train the same parameters: streamed AdamW bit for bit, the
compiled update to float rounding, against torch's AdamW on the same gradients."""

from __future__ import annotations

import pytest
import torch

from autotune.config import OptimizerConfig, config_from_dict
from autotune.errors import ConfigError
from autotune.train.optim import adamw as optim
from autotune.train.optim.streams import StreamedAdamW, split_groups


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 32),
        torch.nn.LayerNorm(32),
        torch.nn.Linear(32, 16),
        torch.nn.GELU(),
        torch.nn.Linear(16, 4),
    )


def _groups(model: torch.nn.Module) -> list[dict]:
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    return [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]


def _train(
    cfg: OptimizerConfig, steps: int = 5
) -> tuple[list[torch.Tensor], list[float], torch.optim.Optimizer]:
    """``steps`` steps on fixed batches; the odd steps' gradients are large enough to be clipped."""
    model = _model()
    opt = optim.build_optimizer(_groups(model), cfg, capturable=False)
    schedule = optim.build_schedule(opt, cfg)
    gen = torch.Generator().manual_seed(1)
    norms = []
    for i in range(steps):
        x = torch.randn(64, 8, generator=gen)
        loss = (model(x) ** 2).mean() * (30.0 if i % 2 else 0.01)
        loss.backward()
        norms.append(float(optim.clip_and_step(opt, list(model.parameters()), cfg.grad_clip)))
        opt.zero_grad(set_to_none=True)
        schedule.step()
    return [p.detach().clone() for p in model.parameters()], norms, opt


@pytest.mark.parametrize("impl", ["fused", "foreach", "loop"])
@pytest.mark.parametrize("streams", [2, 3])
def test_streamed_adamw_trains_the_same_parameters_bit_for_bit(impl, streams):
    kw = {"impl": impl, "lr": 1e-2, "total_steps": 10}
    want, want_norms, _ = _train(OptimizerConfig(**kw))
    got, norms, opt = _train(OptimizerConfig(**kw, streams=streams))
    assert isinstance(opt, StreamedAdamW)
    assert norms == want_norms and max(norms) > 1.0 > min(
        norms
    )  # clipped on some steps, not on others
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_split_groups_cuts_each_group_into_balanced_runs_in_order():
    big, small = [torch.zeros(100) for _ in range(4)], [torch.zeros(1) for _ in range(3)]
    groups = split_groups(
        [{"params": big, "weight_decay": 0.1}, {"params": small, "weight_decay": 0.0}], 2
    )
    assert [(len(g["params"]), g["shard"], g["weight_decay"]) for g in groups] == [
        (2, 0, 0.1),
        (2, 1, 0.1),
        (2, 0, 0.0),
        (1, 1, 0.0),
    ]
    assert [p for g in groups[:2] for p in g["params"]] == big  # order kept


def test_streams_and_the_compiled_update_exclude_each_other():
    with pytest.raises(
        ConfigError, match=r"optimizer.streams: 2 is not supported; allowed: 1 with impl 'compiled'"
    ):
        config_from_dict({"optimizer": {"impl": "compiled", "streams": 2}})
    with pytest.raises(ConfigError, match=r"optimizer.impl: 'adam' is not one of the choices"):
        config_from_dict({"optimizer": {"impl": "adam"}})


@pytest.mark.slow
def test_compiled_adamw_trains_the_same_parameters_as_torch_adamw():
    """Compiles two small graphs (a CPU compiles slowly: ~30 s here); the math is torch's, fused by Inductor."""
    kw = {"lr": 1e-2, "total_steps": 10}
    want, want_norms, ref = _train(OptimizerConfig(impl="foreach", **kw))
    got, norms, opt = _train(OptimizerConfig(impl="compiled", **kw))
    assert norms == pytest.approx(want_norms, rel=1e-4)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    mine, theirs = opt.state_dict(), ref.state_dict()
    assert {k: sorted(v) for k, v in mine["state"].items()} == {
        k: sorted(v) for k, v in theirs["state"].items()
    }
    assert float(mine["state"][0]["step"]) == 5.0
