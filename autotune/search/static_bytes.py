"""Device bytes a configuration holds whatever its batch: weights, gradients and optimizer state.

Counted from the workload's model built on the meta device (no memory, no weights), once per
study and model layout (:func:`layout`): each parameter's size, whether it trains, and the regions
that use it. A configuration's bytes then follow the rules the training session applies
(:mod:`autotune.train.precision`, :mod:`autotune.train.optim.master`):

* a weight is stored fp32 where any region using it runs in fp32 or no region owns it; otherwise
  in ``precision.trainable_dtype`` if it trains, ``precision.frozen_dtype`` if not; with
  ``optimizer.impl: master`` a trainable fp32 weight used only by plain linear layers of bf16
  regions is stored in bf16;
* a trainable weight has a gradient of its own dtype;
* the optimizer holds :meth:`OptimizerConfig.state_bytes_per_param` bytes per trainable
  parameter (the masters only of the weights stored in bf16);
* buffers are counted as built.

What is not counted (it lands in the activation term the peak model fits): copies a workload makes
of frozen weights when the model is prepared, the CUDA context, and the allocator's fragmentation.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from autotune.config import TrainConfig
from autotune.config._strict import to_dict

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
MASTER_BYTES = 4
"""An fp32 master copy per parameter (``optimizer.impl: master``)."""


@dataclass(frozen=True)
class Param:
    """One parameter of the meta model."""

    numel: int
    element_bytes: int
    floating: bool
    trainable: bool
    uses: tuple[tuple[str, bool], ...]
    """(region, used by a plain ``nn.Linear`` there) for each use; empty: no region owns it."""


@dataclass(frozen=True)
class Layout:
    params: tuple[Param, ...]
    buffer_bytes: int


def static_bytes(cfg: TrainConfig) -> int:
    """Weights, gradients, optimizer state and buffers of ``cfg`` in bytes (see the module docstring)."""
    lay = layout(_layout_key(cfg))
    total = float(lay.buffer_bytes)
    for p in lay.params:
        if not p.floating:
            total += p.numel * p.element_bytes
            continue
        mastered = _mastered(p, cfg)
        weight = 2 if mastered else _weight_bytes(p, cfg)
        total += p.numel * weight
        if p.trainable:
            total += p.numel * (weight + _state_bytes(cfg, weight, mastered))
    return int(total)


def _state_bytes(cfg: TrainConfig, weight: int, mastered: bool) -> float:
    state = cfg.optimizer.state_bytes_per_param(weight)
    if _masters(cfg) and not mastered:  # only the weights stored in bf16 have a master
        state = max(0.0, state - MASTER_BYTES)
    return state


def _masters(cfg: TrainConfig) -> bool:
    return cfg.optimizer.impl == "master"


def _mastered(p: Param, cfg: TrainConfig) -> bool:
    """A trainable fp32 weight used only by plain linear layers of bf16 regions: with
    ``optimizer.impl: master`` stored in bf16, its fp32 value held by the optimizer."""
    prec = cfg.precision
    return (
        _masters(cfg)
        and p.trainable
        and bool(p.uses)
        and prec.trainable_dtype == "fp32"
        and all(prec.of(region) == "bf16" and linear for region, linear in p.uses)
    )


def _weight_bytes(p: Param, cfg: TrainConfig) -> int:
    prec = cfg.precision
    if not p.uses or "fp32" in {prec.of(region) for region, _ in p.uses}:
        return 4
    return DTYPE_BYTES[prec.trainable_dtype if p.trainable else prec.frozen_dtype]


def _layout_key(cfg: TrainConfig) -> str:
    """What the meta model's layout depends on, as a hashable string."""
    return json.dumps(
        {
            "workload": cfg.workload,
            "preset": cfg.preset,
            "data": to_dict(cfg.data),
            "freeze": list(cfg.model.freeze),
            "unfreeze": list(cfg.model.unfreeze),
        },
        sort_keys=True,
    )


@functools.lru_cache(maxsize=16)
def layout(key: str) -> Layout:
    """The meta model's parameters for :func:`_layout_key`'s ``key`` (built once per layout)."""
    from torch import nn

    from autotune.config import DataConfig
    from autotune.config.io import config_from_dict
    from autotune.workloads import get_workload

    spec = json.loads(key)
    workload = get_workload(spec["workload"])
    workload.fit_data(spec["preset"], config_from_dict(spec["data"], DataConfig))
    model = workload.build_model(spec["preset"], "meta")
    regions = workload.regions(model)
    for name in spec["freeze"]:
        for m in regions[name]:
            m.requires_grad_(False)
    for name in spec["unfreeze"]:
        for m in regions[name]:
            m.requires_grad_(True)
    uses: dict[int, list[tuple[str, bool]]] = {}
    for name, modules in regions.items():
        for module in modules:
            for sub in module.modules():
                linear = type(sub).forward is nn.Linear.forward
                for q in sub.parameters(recurse=False):
                    uses.setdefault(id(q), []).append((name, linear))
    params = tuple(
        Param(
            q.numel(),
            q.element_size(),
            q.is_floating_point(),
            q.requires_grad,
            tuple(uses.get(id(q), ())),
        )
        for q in model.parameters()
    )
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return Layout(params, buffers)
