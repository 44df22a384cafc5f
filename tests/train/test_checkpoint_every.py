"""``checkpointing.every``: one block in ``every`` of a checkpointed region recomputes its forward in
backward; the gradients stay those of the plain model and the activations kept for backward fall
with each block checkpointed."""

from __future__ import annotations

import copy

import pytest
import torch

from autotune.config import config_from_dict
from autotune.errors import ConfigError
from autotune.train import knobs
from autotune.workloads import get_workload

W = get_workload("gr00t_n16")


def _loss_and_saved(model, batch) -> tuple[torch.Tensor, int, list[torch.Tensor]]:
    """The loss, the bytes autograd kept for backward, and the gradients."""
    saved = 0

    def pack(t):
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    model.zero_grad(set_to_none=True)
    torch.manual_seed(3)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = W.loss(model, batch)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    return loss.detach(), saved, grads


def test_every_other_block_is_checkpointed_and_the_gradients_are_the_plain_ones():
    torch.manual_seed(0)
    plain = W.build_model("tiny", "cpu")
    batch = W.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(1))
    want, kept_plain, want_grads = _loss_and_saved(plain, batch)
    kept = {}
    for every in (1, 2):
        model = copy.deepcopy(plain)
        blocks = W.blocks(model)
        n = len(blocks["dit"])
        assert knobs.apply_checkpointing(blocks, ["dit"], every) == -(-n // every)
        loss, kept[every], got = _loss_and_saved(model, batch)
        assert torch.equal(loss, want)
        for a, b in zip(got, want_grads):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    # checkpointing every block keeps the least, every other block more, none the most
    assert kept[1] < kept[2] < kept_plain, (kept, kept_plain)


def test_every_needs_a_checkpointed_region():
    with pytest.raises(ConfigError, match=r"checkpointing.every: 2 has no region to apply to"):
        config_from_dict({"checkpointing": {"every": 2}})
    assert (
        config_from_dict({"checkpointing": {"regions": ["dit"], "every": 2}}).checkpointing.every
        == 2
    )
