"""``model.frozen_prefix_no_grad``: the frozen backbone of N1.6 and N1.7 runs with gradients off.

Exact by construction (nothing in a frozen prefix needs a gradient), so the loss and every gradient
are compared bit for bit with the stock step, whole and split at the prefix (``optimizer.overlap``'s
path); a prefix region that trains (``model.unfreeze``) refuses the knob in one line.
"""

from __future__ import annotations

import pytest
import torch

from autotune.config import ModelConfig, config_from_dict
from autotune.errors import IncompatibleConfigError
from autotune.workloads import get_workload

WORKLOADS = ("gr00t_n16", "gr00t_n17")


def _options(workload, **knobs) -> ModelConfig:
    return ModelConfig(options=workload.model_knobs(**knobs))


def _step(name: str, no_grad: bool):
    """Loss, gradients and the grad mode the vision tower ran in, of one tiny step."""
    w = get_workload(name)
    torch.manual_seed(0)
    model = w.build_model("tiny", "cpu")
    w.apply_model_options(model, _options(w, frozen_prefix_no_grad=no_grad))
    modes: list[bool] = []
    model.vision.register_forward_pre_hook(lambda *_: modes.append(torch.is_grad_enabled()))
    batch = w.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(1))
    torch.manual_seed(3)  # the same noise, flow times and dropout
    loss = w.loss(model, batch)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    return loss.detach(), grads, modes


@pytest.mark.parametrize("name", WORKLOADS)
def test_the_prefix_without_gradients_gives_the_same_loss_and_gradients_bit_for_bit(name):
    ref_loss, ref, ref_modes = _step(name, no_grad=False)
    loss, grads, modes = _step(name, no_grad=True)
    assert ref_modes == [True] and modes == [False]
    assert torch.equal(loss, ref_loss) and grads.keys() == ref.keys()
    for n in ref:
        assert torch.equal(grads[n], ref[n]), n


@pytest.mark.parametrize("name", WORKLOADS)
def test_the_split_loss_with_the_knob_is_the_loss(name):
    w = get_workload(name)
    model = w.build_model("tiny", "cpu").eval()  # no dropout: both sides draw the same noise
    w.apply_model_options(model, _options(w, frozen_prefix_no_grad=True))
    batch = w.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(1))
    split = w.split_loss(model)
    torch.manual_seed(3)
    whole = w.loss(model, batch)
    torch.manual_seed(3)
    hidden = split.prefix(batch)
    assert hidden.grad_fn is None and torch.equal(split.rest(hidden, batch), whole)


@pytest.mark.parametrize(("name", "region"), [("gr00t_n16", "llm_frozen"), ("gr00t_n17", "vision")])
def test_a_trained_prefix_region_refuses_the_knob(name, region):
    from autotune.train.session import Session

    cfg = config_from_dict(
        {
            "workload": name,
            "preset": "tiny",
            "batch_size": 2,
            "device": "cpu",
            "data": {"source": "synthetic"},
            "model": {"unfreeze": [region], "frozen_prefix_no_grad": True},
        }
    )
    with pytest.raises(
        IncompatibleConfigError,
        match=rf"^model.frozen_prefix_no_grad: refused: model.unfreeze trains \['{region}'\]",
    ):
        Session(cfg)
    cfg.model.unfreeze = ["llm_trainable" if name == "gr00t_n16" else "vlln"]  # not in the prefix
    assert Session(cfg).model.frozen_prefix_no_grad
