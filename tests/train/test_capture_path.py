"""Warm-up steps take the capture's code path (a Hugging Face model's mask), and it computes the same."""

from __future__ import annotations

import pytest
import torch

from autotune.train.window.capture_path import capture_path

transformers = pytest.importorskip("transformers")
from transformers.utils import import_utils  # noqa: E402

from autotune.workloads import get_workload  # noqa: E402


def test_inside_a_capture_path_transformers_counts_as_capturing_and_is_restored_after():
    assert not import_utils.is_tracing()
    with capture_path() as patched:
        assert patched == ["transformers.utils.import_utils.is_cuda_stream_capturing"]
        assert import_utils.is_tracing()
    assert not import_utils.is_tracing()
    with pytest.raises(RuntimeError), capture_path():
        raise RuntimeError("a failed warm-up step")
    assert not import_utils.is_tracing()  # restored on the way out of a failure too


def _loss_and_grads(model, batch):
    model.zero_grad(set_to_none=True)
    loss = get_workload("hf_causal_lm").loss(model, batch)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_the_capture_path_builds_the_mask_and_trains_the_same():
    """The causal LM's decoder sees an attention mask tensor on the capture path and None off it (SDPA's
    causal flag): the two give the same loss and gradients."""
    workload = get_workload("hf_causal_lm")
    torch.manual_seed(0)
    model = workload.build_model("tiny", "cpu").float()
    batch = workload.synthetic_batch(
        "tiny", 2, torch.device("cpu"), torch.Generator().manual_seed(0)
    )
    masks = []
    hook = model.model.layers[0].register_forward_pre_hook(
        lambda m, args, kwargs: masks.append(kwargs.get("attention_mask")), with_kwargs=True
    )
    plain = _loss_and_grads(model, batch)
    with capture_path():
        captured = _loss_and_grads(model, batch)
    hook.remove()
    assert masks[0] is None and torch.is_tensor(masks[1])
    torch.testing.assert_close(captured[0], plain[0], rtol=1e-5, atol=1e-6)
    for got, want in zip(captured[1], plain[1], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
