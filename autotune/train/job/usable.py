"""Whether a checkpoint that loads fits the job's session, checked before anything of it is applied.

A checkpoint's files are checked against the SHA-256 that its ``trainer_state.json`` records
(:mod:`~autotune.train.job.checkpoint`), which an edit can write again with them; beyond that they
are only known to unpickle. Applied, a structure other than the job's fails deep in torch (a
``KeyError`` in ``load_state_dict``, a ``TypeError`` at the first step) or worse: a moment of another
shape than its parameter crashes the optimizer's step with a segmentation fault. So every file is
compared with what the session holds, and one that does not fit raises
:class:`~autotune.train.job.checkpoint.CorruptCheckpoint` naming the file and what is wrong; the
resume then skips the checkpoint for the one before.

=====================  ===========================================================================
file                   checked
=====================  ===========================================================================
``model.safetensors``  the trainable weights' names and shapes (a ``ConfigError``: another
                       configuration, :func:`~autotune.train.job.state.check_weights`), each a
                       floating-point tensor
``optimizer.pt``       as many parameter groups, each with as many parameters and its
                       hyper-parameters of the kinds the session's optimizer holds; each
                       parameter's state tensors of its shape; no step count past the step
``scheduler.pt``       the schedule's fields of the kinds the session's schedule holds; its position
                       (``last_epoch``) the checkpoint's step
``rng_state.pt``       a list of every rank's random states, each set on a generator of its own
=====================  ===========================================================================
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from autotune.errors import first_line, kind_of, short_repr
from autotune.train.job import offload_state, state
from autotune.train.job.checkpoint import (
    OPTIMIZER,
    RNG,
    SCHEDULER,
    STATE,
    WEIGHTS,
    CorruptCheckpoint,
    Loaded,
)
from autotune.train.session import Session

GROUP_KEYS = ("lr", "betas", "eps", "weight_decay")
"""What every parameter group of AdamW holds (an optimizer of another implementation may add keys)."""
SCHEDULE_KEYS = ("last_epoch", "lr_lambdas")
"""What loading a schedule reads; its other fields, where present, are of the session's kinds."""
RNG_KEYS = ("python", "numpy", "torch")


def check(session: Session, loaded: Loaded) -> None:
    """Raise :class:`CorruptCheckpoint` where a file of ``loaded`` does not fit ``session`` (see the
    module docstring); ``ConfigError`` where its weights are of another configuration."""
    folder = loaded.path
    params = state.trainable(session)
    state.check_weights(params, loaded.weights, str(folder))
    _check_dtypes(loaded.weights, folder / WEIGHTS)
    _check_optimizer(session.optimizer, loaded.optimizer, folder / OPTIMIZER, loaded.step)
    scheduler = offload_state.match_schedule(session.optimizer, loaded.scheduler)
    _check_schedule(session.schedule, scheduler, folder / SCHEDULER, loaded.step)
    _check_rngs(loaded.rng, session.device, folder / RNG)


def _check_dtypes(weights: dict[str, torch.Tensor], where: Path) -> None:
    for name, tensor in weights.items():
        if not tensor.dtype.is_floating_point:
            raise CorruptCheckpoint(
                f"{where}: {name}: {str(tensor.dtype).removeprefix('torch.')} values, not "
                "floating-point weights"
            )


# -- optimizer ----------------------------------------------------------------------------------


def _check_optimizer(opt: torch.optim.Optimizer, saved: Any, where: Path, step: int) -> None:
    for part, part_saved, key in _parts(opt, offload_state.match(opt, saved), where):
        ids = _check_groups(part, part_saved, where, key)
        _check_moments(ids, part_saved.get("state"), where, f"{key}state", step)


def _parts(opt: torch.optim.Optimizer, saved: Any, where: Path) -> list[tuple[Any, Any, str]]:
    """(optimizer, its saved state, the key it is saved under) for each optimizer ``opt`` is made
    of: torchao's ``CPUOffloadOptimizer`` (``optimizer.offload``) holds one per parameter on the host
    and one on the device."""
    subs = getattr(opt, "optim_dict", None)
    if subs is None:
        return [(opt, saved, "")]
    offloaded = saved.get("offloaded") if isinstance(saved, dict) else None
    if not isinstance(offloaded, list) or len(offloaded) != len(subs):
        raise CorruptCheckpoint(
            f"{where}: offloaded: {short_repr(offloaded)} is not a list of {len(subs)} optimizer states"
        )
    parts = [(o, s, f"offloaded.{i}.") for i, (o, s) in enumerate(zip(subs.values(), offloaded))]
    if opt.d_opt is not None:
        parts.append((opt.d_opt, saved.get("on-device"), "on-device."))
    return parts


def _check_groups(
    opt: torch.optim.Optimizer, saved: Any, where: Path, key: str
) -> dict[Any, torch.Tensor]:
    """The saved parameter groups against ``opt``'s; the parameter of each saved index (torch pairs
    them in the groups' order)."""
    if not isinstance(saved, dict):
        at = f"{key.rstrip('.')}: " if key else ""
        raise CorruptCheckpoint(f"{where}: {at}{kind_of(saved)}, not an optimizer's state")
    groups = saved.get("param_groups")
    if groups is None:
        raise CorruptCheckpoint(f"{where}: {key}param_groups: missing")
    if not isinstance(groups, list) or len(groups) != len(opt.param_groups):
        count = f"{len(groups)} groups" if isinstance(groups, list) else kind_of(groups)
        raise CorruptCheckpoint(
            f"{where}: {key}param_groups: {count}, the optimizer has {len(opt.param_groups)}"
        )
    ids: dict[Any, torch.Tensor] = {}
    for i, (group, given) in enumerate(zip(opt.param_groups, groups)):
        at = f"{key}param_groups.{i}"
        template = {k: v for k, v in group.items() if k not in ("params", "param_names")}
        needed = tuple(k for k in GROUP_KEYS if k in group)
        problem = _fields(template, given, needed, at) or _params(group, given, at)
        if problem:
            raise CorruptCheckpoint(f"{where}: {problem}")
        ids.update(zip(given["params"], group["params"]))
    return ids


def _params(group: dict[str, Any], given: dict[str, Any], at: str) -> str | None:
    params = given.get("params")
    if not (
        isinstance(params, list)
        and len(params) == len(group["params"])
        and all(isinstance(p, int) and not isinstance(p, bool) for p in params)
    ):
        return f"{at}.params: {short_repr(params)} is not a list of {len(group['params'])} indices"
    return None


def _check_moments(
    ids: dict[Any, torch.Tensor], saved: dict[Any, Any], where: Path, key: str, step: int
) -> None:
    """Each parameter's state: tensors of its shape (its moments), a step count no later than the
    checkpoint's step."""
    if not isinstance(saved, dict):
        raise CorruptCheckpoint(f"{where}: {key}: {kind_of(saved)}, not a mapping")
    for index, values in saved.items():
        param = ids.get(index)
        if param is None or not isinstance(values, dict):
            raise CorruptCheckpoint(
                f"{where}: {key}.{short_repr(index)}: not the state of a parameter of its param_groups"
            )
        for name, value in values.items():
            problem = _moment(name, value, param, step)
            if problem:
                raise CorruptCheckpoint(f"{where}: {key}.{index}.{name}: {problem}")


def _moment(name: Any, value: Any, param: torch.Tensor, step: int) -> str | None:
    if name == "step":
        if not _is_number(value):
            return f"{short_repr(value)} is not a step count"
        # fewer: an fp16 scaler skips the updates of steps whose gradients overflowed
        if not 0 <= float(value) <= step:
            return (
                f"{float(value):g} is not a step count from 0 to the step of its {STATE} ({step})"
            )
        return None
    if not isinstance(value, torch.Tensor) or not value.dtype.is_floating_point:
        return f"{short_repr(value)} is not a floating-point tensor"
    if value.shape != param.shape:
        return f"a tensor of shape {list(value.shape)}, its parameter's is {list(param.shape)}"
    return None


# -- schedule and random states -----------------------------------------------------------------


def _check_schedule(schedule: Any, saved: Any, where: Path, step: int) -> None:
    problem = _fields(schedule.state_dict(), saved, SCHEDULE_KEYS, "")
    if problem is None:
        problem = next(
            (
                f"lr_lambdas.{i}: {short_repr(fn)} is not null or a mapping"
                for i, fn in enumerate(saved["lr_lambdas"])
                if fn is not None and not isinstance(fn, dict)
            ),
            None,
        )
    if problem is None and saved["last_epoch"] != step:
        problem = f"last_epoch: {saved['last_epoch']} is not the step of its {STATE} ({step})"
    if problem:
        raise CorruptCheckpoint(f"{where}: {problem}")


def _check_rngs(rngs: Any, device: torch.device, where: Path) -> None:
    if not isinstance(rngs, list) or not rngs:
        raise CorruptCheckpoint(
            f"{where}: not a list of every rank's random states ({kind_of(rngs)})"
        )
    for rank, rng in enumerate(rngs):
        if not isinstance(rng, dict):
            raise CorruptCheckpoint(f"{where}: rank {rank}: {kind_of(rng)}, not random states")
        missing = next((k for k in RNG_KEYS if k not in rng), None)
        if missing:
            raise CorruptCheckpoint(f"{where}: rank {rank}: no {missing!r} random state")
        for kind in (*RNG_KEYS, "cuda"):
            try:
                _set_aside(kind, rng, device)
            except Exception as exc:  # noqa: BLE001  any failure to set it: not this checkpoint
                raise CorruptCheckpoint(
                    f"{where}: rank {rank}: its {kind} random state does not apply "
                    f"({type(exc).__name__}: {first_line(exc)})"
                ) from None


def _set_aside(kind: str, rng: dict[str, Any], device: torch.device) -> None:
    """Set the ``kind`` state of ``rng`` on a generator of its own (this process's stay as they
    are), raising what :func:`~autotune.train.job.state.set_rng_state` would raise."""
    if kind == "python":
        random.Random().setstate(rng["python"])
    elif kind == "numpy":
        np.random.RandomState().set_state(state.numpy_state(rng["numpy"]))
    elif kind == "torch":
        torch.Generator().set_state(rng["torch"])
    elif device.type == "cuda" and "cuda" in rng:
        saved, own = rng["cuda"], torch.cuda.get_rng_state(device)
        if not (
            isinstance(saved, torch.Tensor)
            and saved.dtype == own.dtype
            and saved.shape == own.shape
        ):
            raise ValueError(
                f"{short_repr(saved)} is not a CUDA generator's state of {own.numel()} bytes"
            )


# -- kinds of values ----------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    """A number, or a tensor of one (a learning rate or a step count kept on the device)."""
    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and not value.is_complex() and value.dtype != torch.bool
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fields(template: dict[str, Any], value: Any, needed: tuple[str, ...], key: str) -> str | None:
    """``key: what is wrong`` where the mapping ``value`` lacks one of ``needed`` or holds a field of
    ``template`` of another kind (:func:`_mismatch`); None where it fits."""
    if not isinstance(value, dict):
        return f"{key + ': ' if key else ''}{kind_of(value)}, not a mapping"
    missing = next((k for k in needed if k not in value), None)
    if missing is not None:
        return f"{_join(key, missing)}: missing"
    return next(
        (
            p
            for k, t in template.items()
            if k in value and (p := _mismatch(t, value[k], _join(key, k)))
        ),
        None,
    )


def _mismatch(template: Any, value: Any, key: str) -> str | None:
    """``key: what is wrong`` where ``value`` is not of the kind of the session's own ``template``:
    a number for a number (or a tensor of one), true or false (or null: torch's default) for a
    flag, as many items for a list, the same keys for a mapping; None where it is."""
    if template is None or (value is None and isinstance(template, bool)):
        return None
    if isinstance(template, bool):
        ok, kind = isinstance(value, bool), "true or false"
    elif _is_number(template):
        ok, kind = _is_number(value), "a number"
    elif isinstance(template, torch.Tensor):
        ok = isinstance(value, torch.Tensor) and value.shape == template.shape
        kind = f"a tensor of shape {list(template.shape)}"
    elif isinstance(template, str):
        ok, kind = isinstance(value, str), "text"
    elif isinstance(template, dict):
        return _fields(template, value, tuple(template), key)
    elif isinstance(template, list | tuple):
        if not isinstance(value, list | tuple) or len(value) != len(template):
            return f"{key}: {short_repr(value)} is not a list of {len(template)} items"
        return next(
            (
                p
                for i, (t, v) in enumerate(zip(template, value))
                if (p := _mismatch(t, v, f"{key}.{i}"))
            ),
            None,
        )
    else:
        return None
    return None if ok else f"{key}: {short_repr(value)} is not {kind}"


def _join(key: str, name: Any) -> str:
    return f"{key}.{name}" if key else str(name)
