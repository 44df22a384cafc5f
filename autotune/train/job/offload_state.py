"""An optimizer state saved with ``optimizer.offload`` in the layout of one without, and the other
way, so that a job resumed with the offload switched on or off takes its state over; the schedule's
lists of one value per parameter group likewise (:func:`match_schedule`).

torch's AdamW saves ``{"state": {index: moments}, "param_groups": [...]}``, its indices running
over the groups' parameters in order. The offloaded one (torchao's ``CPUOffloadOptimizer``) saves
``{"offloaded": [one AdamW's state per parameter of MINIMAL_SIZE values or more],
"on-device": an AdamW over the smaller ones}``, both in the groups' order; a group without small
parameters has no group on the device. The moments are the same tensors (fp32 AdamW moments and
step counts); only where they sit in the mapping differs. A state of any other shape is handed on
as it is, for :mod:`usable` to name what is wrong with it.
"""

from __future__ import annotations

from typing import Any

import torch

from autotune.train.optim.offload import MINIMAL_SIZE


def match(opt: torch.optim.Optimizer, saved: Any) -> Any:
    """``saved`` in ``opt``'s layout where it is in the other one, else as it is."""
    if not isinstance(saved, dict):
        return saved
    offloaded = getattr(opt, "groups_given", None) is not None
    try:
        if offloaded and "offloaded" not in saved and "state" in saved:
            return _split(opt, saved)
        if not offloaded and "offloaded" in saved and "state" not in saved:
            return _merged(opt, saved)
    except (KeyError, IndexError, TypeError, AttributeError, StopIteration, ValueError):
        pass  # not a state of either layout: usable.check names what is wrong
    return saved


def _hyper(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "params"}


def _split(opt: Any, saved: dict[str, Any]) -> dict[str, Any]:
    """A flat state laid out as ``opt``'s: one state per offloaded parameter, the rest on the device."""
    groups, moments = saved["param_groups"], saved["state"]
    if len(groups) != len(opt.groups_given):
        return saved
    offloaded: list[dict[str, Any]] = []
    device: dict[str, Any] = {"state": {}, "param_groups": []}
    for group, params in zip(groups, opt.groups_given, strict=True):
        small = []
        for index, param in zip(group["params"], params, strict=True):
            state = moments.get(index)
            if param in opt.param_d2h_map:
                one = {} if state is None else {0: state}
                offloaded.append({"state": one, "param_groups": [{**_hyper(group), "params": [0]}]})
                continue
            at = sum(len(g["params"]) for g in device["param_groups"]) + len(small)
            if state is not None:
                device["state"][at] = state
            small.append(at)
        if small:
            device["param_groups"].append({**_hyper(group), "params": small})
    out: dict[str, Any] = {"offloaded": offloaded}
    if opt.d_opt is not None:
        out["on-device"] = device
    return out


def _merged(opt: torch.optim.Optimizer, saved: dict[str, Any]) -> dict[str, Any]:
    """An offloaded state laid out as ``opt``'s flat one: its groups' parameters numbered in order."""
    offloaded = iter(saved["offloaded"])
    device = saved.get("on-device") or {"state": {}, "param_groups": []}
    device_groups = iter(device["param_groups"])
    moments: dict[int, Any] = {}
    groups: list[dict[str, Any]] = []
    index = small_index = 0
    for group in opt.param_groups:
        params = group["params"]
        hyper = next(device_groups) if any(p.numel() < MINIMAL_SIZE for p in params) else None
        for param in params:
            if param.numel() >= MINIMAL_SIZE:
                one = next(offloaded)
                hyper = hyper or one["param_groups"][0]
                state = one["state"].get(0)
            else:
                state = device["state"].get(small_index)
                small_index += 1
            if state is not None:
                moments[index] = state
            index += 1
        start = index - len(params)
        groups.append({**_hyper(hyper or group), "params": list(range(start, index))})
    if next(offloaded, None) is not None:
        return saved  # more offloaded states than this optimizer's parameters
    return {"state": moments, "param_groups": groups}


SCHEDULE_LISTS = ("base_lrs", "_last_lr", "lr_lambdas")
"""A schedule's state that holds one value per parameter group of its optimizer."""


def match_schedule(opt: torch.optim.Optimizer, saved: Any) -> Any:
    """A schedule's ``saved`` state with its per-group lists laid out for ``opt``'s groups, where
    they are of the other layout's count, else as it is. The offloaded optimizer's groups are its
    device groups (one per given group with small parameters), then one per offloaded parameter."""
    if not isinstance(saved, dict):
        return saved
    other, sources = _group_sources(opt)
    out = dict(saved)
    for key in SCHEDULE_LISTS:
        values = saved.get(key)
        if isinstance(values, list) and len(values) == other != len(sources):
            out[key] = [values[i] for i in sources]
    return out


def _group_sources(opt: Any) -> tuple[int, list[int]]:
    """(how many groups the other layout has, for each of ``opt``'s groups the other layout's group
    it was made from or that was made from it)."""
    given = getattr(opt, "groups_given", None)
    if given is not None:
        small = [i for i, ps in enumerate(given) if any(p not in opt.param_d2h_map for p in ps)]
        large = [i for i, ps in enumerate(given) for p in ps if p in opt.param_d2h_map]
        return len(given), small + large
    groups = [g["params"] for g in opt.param_groups]
    small = [i for i, ps in enumerate(groups) if any(p.numel() < MINIMAL_SIZE for p in ps)]
    large = [i for i, ps in enumerate(groups) for p in ps if p.numel() >= MINIMAL_SIZE]
    order = small + large
    if sorted(set(order)) != list(range(len(groups))):
        return -1, []  # a group without parameters: no offloaded layout to come from
    return len(order), [order.index(i) for i in range(len(groups))]
