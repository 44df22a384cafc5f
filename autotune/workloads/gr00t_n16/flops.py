"""Counting the replica: parameters per region and per spec module, FLOPs per sample.

FLOPs come from running one sample's forward and backward on the meta device under
``torch.utils.flop_counter.FlopCounterMode``: the count follows the model as written (matmuls,
batched matmuls and attention), nothing is estimated by hand, and no memory is allocated.

Every measured run needs the counts for its MFU, and counting costs a second or more a run, so
:func:`cached_total` keeps them in ``$AUTOTUNE_CACHE/flops`` keyed by the preset as resolved, the
count asked for (upstream or useful), torch's version and a digest of this package's source: a
change to the model's code is a new key, never a stale count.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from pathlib import Path
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


def count_flops(workload: Gr00tN16, preset: str, *, useful: bool = False) -> dict[str, float]:
    """FLOPs of one sample's training step: ``forward``, ``backward`` and ``total``.

    As upstream runs it by default; ``useful``: without the work whose output never reaches the loss
    or a gradient (the LM-head logits, the decoder on the state token, the keys and values of the VL
    tokens a DiT cross-attention layer masks): the model with ``skip_dead_work`` and
    ``attended_kv_only``. The text layers' keys still count up to their static capacity (the text
    room the images leave), whatever the sample's text length.
    """
    model = workload.build_model(preset, "meta")
    model.configure(skip_dead_work=useful, attended_kv_only=useful)
    batch = workload.synthetic_batch(preset, 1, "meta", torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as fwd:
        loss = model(batch)
    with FlopCounterMode(display=False) as bwd:
        loss.backward()
    f, b = float(fwd.get_total_flops()), float(bwd.get_total_flops())
    return {"forward": f, "backward": b, "total": f + b}


def cached_total(workload: Gr00tN16, preset: str, *, useful: bool) -> float:
    """``count_flops(...)["total"]``, read from the cache where counted before (an unreadable or
    unwritable cache only costs the count)."""
    from autotune.config.io import write_text_atomic
    from autotune.data.cache import cache_root

    key = repr((workload.resolve(preset), useful, torch.__version__, _source_digest()))
    path = cache_root() / "flops" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        kept = json.loads(path.read_text())
        if kept["key"] == key:
            return float(kept["total"])
    total = count_flops(workload, preset, useful=useful)["total"]
    with contextlib.suppress(OSError):
        write_text_atomic(path, json.dumps({"key": key, "total": total}))
    return total


@functools.cache
def _source_digest() -> str:
    """A digest of the replica's source files (the model the counts are of)."""
    digest = hashlib.sha256()
    for file in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(file.name.encode() + file.read_bytes())
    return digest.hexdigest()


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
    useful = count_flops(workload, preset, useful=True)
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
