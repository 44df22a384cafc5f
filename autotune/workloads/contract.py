"""Checks of the workload contract (``autotune.workloads.base``), each failing with one line that
names the workload, the method and the rule it broke, e.g.
``workload 'mine': regions(): module 'encoder.0' is in regions 'a' and 'b'; regions are disjoint``.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from autotune.errors import WorkloadError, short_repr

if TYPE_CHECKING:
    from autotune.workloads.base import Workload

RESERVED = ("all", "other")
"""Names a region cannot take: ``compile.regions: [all]`` is the whole model, ``other`` what no region owns."""


def broken(workload: Workload, method: str, rule: str) -> WorkloadError:
    return WorkloadError(f"workload {workload.name!r}: {method}(): {rule}")


def checked_flops(workload: Workload, preset: str) -> tuple[float, float]:
    """``flops_per_sample`` and ``useful_flops_per_sample`` of ``preset``, each a finite number >= 0:
    MFU and the report's figures divide and format them."""
    flops = []
    for method in ("flops_per_sample", "useful_flops_per_sample"):
        value = getattr(workload, method)(preset)
        number = _real(value)
        if number is None or not 0 <= number < math.inf:
            raise broken(
                workload,
                method,
                f"returned {short_repr(value)}; it must return the floating-point operations of one "
                "sample's step, a finite number >= 0",
            )
        flops.append(number)
    return flops[0], flops[1]


def _real(value: Any) -> float | None:
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer past a float
        return math.inf


def checked_model(workload: Workload, model: Any) -> nn.Module:
    """``model`` as ``build_model`` must return it: an ``nn.Module`` with floating parameters in fp32."""
    if not isinstance(model, nn.Module):
        raise broken(
            workload,
            "build_model",
            f"returned a {type(model).__name__}; it must return a torch.nn.Module",
        )
    for name, p in model.named_parameters():
        if p.is_floating_point() and p.dtype != torch.float32:
            raise broken(
                workload,
                "build_model",
                f"parameter {name!r} is {p.dtype}; every floating parameter must be "
                "fp32 (autotune sets the dtypes from the precision map)",
            )
    return model


def checked_regions(
    workload: Workload, model: nn.Module, regions: Any, method: str = "regions"
) -> dict[str, list[nn.Module]]:
    """``regions`` as ``regions``/``blocks`` must return them: names to lists of disjoint modules of ``model``."""
    if not isinstance(regions, dict) or not regions:
        raise broken(
            workload,
            method,
            f"returned {type(regions).__name__}; it must return a non-empty dict of "
            "region name -> list of modules",
        )
    names = {id(m): n for n, m in model.named_modules()}
    owner: dict[int, str] = {}
    for region, modules in regions.items():
        if not isinstance(region, str) or not region.isidentifier() or region in RESERVED:
            raise broken(
                workload,
                method,
                f"region name {region!r} is not allowed; names are identifiers, not {list(RESERVED)}",
            )
        if not isinstance(modules, (list, tuple)) or not modules:
            raise broken(
                workload,
                method,
                f"region {region!r} maps to {type(modules).__name__}; it must map to a "
                "non-empty list of modules",
            )
        for m in modules:
            if not isinstance(m, nn.Module) or id(m) not in names:
                raise broken(
                    workload,
                    method,
                    f"region {region!r} holds {type(m).__name__}, not a module of the model",
                )
            if isinstance(m, (nn.ModuleList, nn.ModuleDict)):
                raise broken(
                    workload,
                    method,
                    f"region {region!r} holds {names[id(m)] or 'the model'!r}, a "
                    f"{type(m).__name__}, which has no forward; list its modules instead",
                )
            if id(m) in owner and method == "regions":
                raise broken(
                    workload,
                    method,
                    f"module {names[id(m)]!r} is in regions {owner[id(m)]!r} and "
                    f"{region!r}; regions are disjoint",
                )
            owner[id(m)] = region
    return {r: list(ms) for r, ms in regions.items()}


def checked_blocks(
    workload: Workload, model: nn.Module, regions: dict[str, list[nn.Module]]
) -> dict[str, list[nn.Module]]:
    blocks = checked_regions(workload, model, workload.blocks(model), "blocks")
    unknown = sorted(set(blocks) - set(regions))
    if unknown:
        raise broken(
            workload,
            "blocks",
            f"names {unknown[0]!r}, which is not a region; regions: {sorted(regions)}",
        )
    return {r: blocks.get(r, regions[r]) for r in regions}


def checked_loss(workload: Workload, loss: Any) -> torch.Tensor:
    if not torch.is_tensor(loss) or loss.numel() != 1 or not loss.is_floating_point():
        what = (
            f"a tensor of shape {list(loss.shape)}"
            if torch.is_tensor(loss)
            else f"a {type(loss).__name__}"
        )
        raise broken(
            workload,
            "loss",
            f"returned {what}; it must return the scalar (floating) loss tensor of the batch",
        )
    if not loss.requires_grad:
        raise broken(
            workload,
            "loss",
            "returned a loss that does not require grad: no trainable parameter reaches it",
        )
    return loss.reshape(())


def checked_batch(workload: Workload, batch: Any, method: str) -> dict[str, torch.Tensor]:
    if not isinstance(batch, dict) or not all(
        isinstance(k, str) and torch.is_tensor(v) for k, v in batch.items()
    ):
        raise broken(
            workload,
            method,
            f"gave a {type(batch).__name__}; a batch is a dict of tensors (name -> tensor)",
        )
    return batch


def epochs(workload: Workload, loader: Any) -> Iterator[dict[str, torch.Tensor]]:
    """The batches of ``make_loader``'s loader for as long as training asks, a finite one re-iterated
    epoch after epoch; each batch checked to be a dict of tensors."""
    for epoch in itertools.count():
        empty = True
        for batch in loader:
            empty = False
            yield checked_batch(workload, batch, "make_loader")
        if empty:
            what = "an iterator (spent after one pass)" if iter(loader) is loader else "an iterable"
            raise broken(
                workload,
                "make_loader",
                f"returned {what} that gave no batch in epoch {epoch}; it must "
                "return a re-iterable of batches (a DataLoader), or override dataset() instead",
            )
