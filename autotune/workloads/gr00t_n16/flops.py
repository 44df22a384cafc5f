"""Counting the replica: parameters per region and per spec module, FLOPs per sample.

FLOPs come from running one sample's forward and backward on the meta device under
``torch.utils.flop_counter.FlopCounterMode``: the count follows the model as written (matmuls,
batched matmuls and attention), nothing is estimated by hand, and no memory is allocated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.utils.flop_counter import FlopCounterMode

if TYPE_CHECKING:
    from autotune.workloads.gr00t_n16.workload import Gr00tN16


def _numel(params) -> int:
    return sum(p.numel() for p in params)


def spec_modules(model) -> dict[str, int]:
    """Parameter counts by the rows of the spec's parameter table."""
    llm_layers = list(model.llm_frozen.blocks) + list(model.llm_trainable.blocks)
    pr = model.projectors
    return {
        "siglip2": _numel(model.vision.parameters()),
        "mlp1": _numel(model.connector.parameters()),
        "qwen3_layers": _numel(p for layer in llm_layers for p in layer.parameters()),
        "token_embedding_and_final_norm": _numel(model.llm_frozen.embed_tokens.parameters())
        + _numel(model.llm_trainable.norm.parameters()),
        "dit": _numel(model.dit.parameters()),
        "state_encoder": _numel(pr.state_encoder.parameters()),
        "action_encoder": _numel(pr.action_encoder.parameters()),
        "action_decoder": _numel(pr.action_decoder.parameters()),
        "position_embedding": _numel(model.position_embedding.parameters()),
        "vlln": _numel(model.vlln.parameters()),
    }


def count_flops(workload: Gr00tN16, preset: str, *, skip_dead_work: bool = False) -> dict[str, float]:
    """FLOPs of one sample's training step: ``forward``, ``backward`` and ``total``.

    As upstream runs it by default; with ``skip_dead_work`` without the work whose output never
    reaches the loss (the LM-head logits, the decoder on the state token): the useful FLOPs.
    """
    model = workload.build_model(preset, "meta")
    model.configure(skip_dead_work=skip_dead_work)
    batch = workload.synthetic_batch(preset, 1, "meta", torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as fwd:
        loss = model(batch)
    with FlopCounterMode(display=False) as bwd:
        loss.backward()
    f, b = float(fwd.get_total_flops()), float(bwd.get_total_flops())
    return {"forward": f, "backward": b, "total": f + b}


def describe(workload: Gr00tN16, preset: str) -> dict[str, Any]:
    """What ``autotune inspect`` prints: parameter counts and FLOPs, computed on the meta device."""
    model = workload.build_model(preset, "meta")
    regions = {
        name: {
            "params": _numel(p for m in mods for p in m.parameters()),
            "trainable": _numel(p for m in mods for p in m.parameters() if p.requires_grad),
        }
        for name, mods in workload.regions(model).items()
    }
    flops = count_flops(workload, preset)
    useful = count_flops(workload, preset, skip_dead_work=True)
    p = workload.resolve(preset)
    return {
        "workload": workload.name,
        "preset": preset,
        "params_total": _numel(model.parameters()),
        "params_trainable": _numel(q for q in model.parameters() if q.requires_grad),
        "regions": regions,
        "spec_modules": spec_modules(model),
        "flops_per_sample": flops["total"],
        "flops_forward_per_sample": flops["forward"],
        "flops_backward_per_sample": flops["backward"],
        "useful_flops_per_sample": useful["total"],
        "tokens_per_sample": p.seq_len,
    }
