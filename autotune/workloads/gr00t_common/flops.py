"""Counting a GR00T replica: parameters per region and per spec module, FLOPs per sample.

FLOPs come from running one sample's forward and backward on the meta device under
``torch.utils.flop_counter.FlopCounterMode``: the count follows the model as written (matmuls,
batched matmuls and attention), nothing is estimated by hand, and no memory is allocated.

Every measured run needs the counts for its MFU, and counting costs a second or more a run, so
:func:`cached` keeps them (and the regions and which of them train, :func:`cached_region_trains`)
in ``$AUTOTUNE_CACHE/flops`` keyed by the preset as resolved, the figure asked for, torch's version
and a digest of the replica's source (its workload's package and this one): a change to the
model's code is a new key, never a stale count.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.flop_counter import FlopCounterMode

if TYPE_CHECKING:
    from autotune.workloads.base import Workload


def numel(params) -> int:
    return sum(p.numel() for p in params)


def count_flops(workload: Workload, preset: str, *, useful: bool = False) -> dict[str, float]:
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


def cached_total(workload: Workload, preset: str, *, useful: bool) -> float:
    """``count_flops(...)["total"]``, read from the cache where counted before (an unreadable or
    unwritable cache only costs the count)."""
    return float(
        cached(
            workload,
            preset,
            ("flops", useful),
            lambda: count_flops(workload, preset, useful=useful)["total"],
        )
    )


def cached_region_trains(workload: Workload, preset: str) -> dict[str, bool]:
    """:meth:`Workload.region_trains`, read from the cache where found before: building the model on
    the meta device costs a tuner's process seconds (its buffers' meta kernels import TorchDynamo)."""
    from autotune.workloads.base import Workload

    def found() -> list:
        return list(Workload.region_trains(workload, preset).items())

    return {
        str(name): bool(trains) for name, trains in cached(workload, preset, ("regions",), found)
    }


def cached(workload: Workload, preset: str, what: tuple, compute: Callable[[], Any]) -> Any:
    """``compute()`` (a JSON value), kept in ``$AUTOTUNE_CACHE/flops`` under the preset as resolved,
    ``what``, torch's version and the replica's source digest; read back where kept before."""
    from autotune.config.io import write_text_atomic
    from autotune.data.cache import cache_root

    package = Path(sys.modules[type(workload).__module__].__file__).parent
    key = repr((workload.resolve(preset), *what, torch.__version__, _source_digest(package)))
    path = cache_root() / "flops" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        kept = json.loads(path.read_text())
        if kept["key"] == key:
            return kept["value"]
    value = compute()
    with contextlib.suppress(OSError):
        write_text_atomic(path, json.dumps({"key": key, "value": value}))
    return value


@functools.cache
def _source_digest(package: Path) -> str:
    """A digest of the replica's source files (the model the counts are of): ``package``'s and the
    shared parts' of this folder."""
    digest = hashlib.sha256()
    for file in sorted([*package.glob("*.py"), *Path(__file__).parent.glob("*.py")]):
        digest.update(file.name.encode() + file.read_bytes())
    return digest.hexdigest()


def describe(
    workload: Workload, preset: str, spec_modules: Callable[[Any], dict[str, int]]
) -> dict[str, Any]:
    """What ``autotune inspect`` prints: parameter counts (per region and per ``spec_modules(model)``,
    the rows of the model's spec) and FLOPs, computed on the meta device."""
    model = workload.build_model(preset, "meta")
    regions = {
        name: {
            "params": numel(p for m in mods for p in m.parameters()),
            "trainable": numel(p for m in mods for p in m.parameters() if p.requires_grad),
        }
        for name, mods in workload.regions(model).items()
    }
    flops = count_flops(workload, preset)
    useful = count_flops(workload, preset, useful=True)
    p = workload.resolve(preset)
    return {
        "workload": workload.name,
        "preset": preset,
        "params_total": numel(model.parameters()),
        "params_trainable": numel(q for q in model.parameters() if q.requires_grad),
        "regions": regions,
        "spec_modules": spec_modules(model),
        "flops_per_sample": flops["total"],
        "flops_forward_per_sample": flops["forward"],
        "flops_backward_per_sample": flops["backward"],
        "useful_flops_per_sample": useful["total"],
        "tokens_per_sample": p.seq_len,
    }
