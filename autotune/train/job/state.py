"""A session's training state in and out: trainable weights, optimizer, schedule, random states.

Taking a snapshot copies the state into host buffers that are kept between checkpoints (page-locked
on CUDA, so that the copy runs at the link's speed and the buffers are not allocated again), after
synchronising the device once; the write then runs from the copy while training goes on.
A tensor subclass in the optimizer's state (torchao's quantized moments) is copied as the tensors
it is made of (codes, scales), so that a checkpoint holds the state as it was, not a dequantized
copy. Restoring copies into the existing tensors in place (parameters, the optimizer's device
learning rate): graphs captured on them, compiled modules and the optimizer keep their addresses.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from autotune.train.job import offload_state
from autotune.train.job.host_memory import LockedMemory
from autotune.train.session import Session


class _Flat:
    """One host buffer holding a fixed set of tensors (their shapes and dtypes) side by side; to be
    page-locked, a :class:`~autotune.train.job.host_memory.LockedMemory` of its own."""

    ALIGN = 64

    def __init__(self, layout: list[tuple[str, torch.Size, torch.dtype]], pin: bool) -> None:
        self.layout = layout
        sizes = [math.prod(shape) * dtype.itemsize for _, shape, dtype in layout]
        offsets, total = [], 0
        for n in sizes:
            offsets.append(total)
            total += -(-n // self.ALIGN) * self.ALIGN
        self.memory: LockedMemory | None = None
        if pin:
            self.memory = LockedMemory.of(total)
            self.flat = self.memory.tensor()
        else:
            self.flat = torch.empty(max(total, 1), dtype=torch.uint8)
        self.views = {
            name: self.flat[off : off + n].view(dtype).view(shape)
            for (name, shape, dtype), off, n in zip(layout, offsets, sizes)
        }

    @property
    def pin(self) -> bool:
        """Page-locked now; not (a locked-memory limit): the copies are synchronous, still correct."""
        return self.memory is not None and self.memory.locked

    def release(self) -> None:
        """Unlock the buffer now (its views stay readable, as pageable memory)."""
        if self.memory is not None:
            self.memory.unlock()


class HostBuffers:
    """Host copies of groups of tensors, one flat buffer per group, reused by every snapshot.

    On CUDA each buffer is page-locked with ``cudaHostRegister`` over whole pages of its own, for as
    long as its memory lives (:mod:`~autotune.train.job.host_memory`; torch's pinned allocator
    rounds an allocation up to a power of two, which for a 13 GB optimizer state can pin nearly
    twice that), so the device-to-host copies run asynchronously at the link's speed;
    the device is synchronised once after them all. One buffer per group and dtype: ``torch.save``
    writes a view's whole storage (each file gets buffers of its own), and refuses a storage viewed
    as two dtypes (bf16 moments beside fp32 step counts, ``precision.trainable_dtype: bf16``).
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._flats: dict[str, _Flat] = {}

    def _flat(self, key: str, tensors: dict[str, torch.Tensor]) -> _Flat:
        layout = [(name, t.shape, t.dtype) for name, t in tensors.items()]
        flat = self._flats.get(key)
        if flat is None or flat.layout != layout:
            if flat is not None:
                flat.release()
            flat = self._flats[key] = _Flat(layout, self.cuda)
        return flat

    def _flats_of(self, group: str, tensors: dict[str, torch.Tensor]) -> list[_Flat]:
        """The group's buffers, one per dtype among its tensors."""
        by_dtype: dict[torch.dtype, dict[str, torch.Tensor]] = {}
        for name, t in tensors.items():
            by_dtype.setdefault(t.dtype, {})[name] = t
        return [self._flat(f"{group}/{dtype}", part) for dtype, part in by_dtype.items()]

    def reserve(self, groups: dict[str, dict[str, torch.Tensor]]) -> float:
        """Allocate (and page-lock) the buffers for ``groups`` now, copying nothing; returns the seconds
        it took. For ``full`` this is ~8.6 s on an H200 host (19.4 GB allocated and registered): done
        at the first checkpoint instead, it stalled the training loop for that long."""
        import time

        start = time.perf_counter()
        for group, tensors in groups.items():
            self._flats_of(group, tensors)
        return time.perf_counter() - start

    def copy(
        self, groups: dict[str, dict[str, torch.Tensor]]
    ) -> dict[str, dict[str, torch.Tensor]]:
        """Host copies of every group's tensors (valid until the next call)."""
        out = {}
        for group, tensors in groups.items():
            views = {n: v for flat in self._flats_of(group, tensors) for n, v in flat.views.items()}
            for name, t in tensors.items():
                views[name].copy_(t.detach(), non_blocking=self.cuda)
            out[group] = {name: views[name] for name in tensors}  # in the state dict's order
        if self.cuda:
            torch.cuda.synchronize()
        return out

    def release(self) -> None:
        for flat in self._flats.values():
            flat.release()
        self._flats = {}


def trainable(session: Session) -> dict[str, torch.Tensor]:
    """The trainable weights by name, each at its full precision: the optimizer's fp32 master where
    it keeps one (``optimizer.impl: master`` stores the parameter itself in bf16)."""
    master = getattr(session.optimizer, "master", None)
    out = {}
    for n, p in session.model.named_parameters():
        if p.requires_grad:
            m = master(p) if master is not None else None
            out[n] = p if m is None else m
    return out


def masters(session: Session) -> dict[str, torch.Tensor]:
    """The fp32 masters of the parameters stored in bf16 (``optimizer.impl: master``), by name."""
    params = dict(session.model.named_parameters())
    return {n: t for n, t in trainable(session).items() if t is not params[n]}


def _tensors(value: Any, path: str, out: dict[str, torch.Tensor]) -> None:
    if is_traceable_wrapper_subclass(value):  # torchao's quantized moments: their codes and scales
        for name in value.__tensor_flatten__()[0]:
            _tensors(getattr(value, name), f"{path}#{name}", out)
    elif isinstance(value, torch.Tensor):
        out[path] = value
    elif isinstance(value, dict):
        for k, v in value.items():
            _tensors(v, f"{path}.{k}", out)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _tensors(v, f"{path}.{i}", out)


def _rebuild(value: Any, path: str, copies: dict[str, torch.Tensor]) -> Any:
    if is_traceable_wrapper_subclass(value):
        names, meta = value.__tensor_flatten__()
        inner = {n: _rebuild(getattr(value, n), f"{path}#{n}", copies) for n in names}
        return type(value).__tensor_unflatten__(inner, meta, value.shape, value.stride())
    if isinstance(value, torch.Tensor):
        return copies[path]
    if isinstance(value, dict):
        return {k: _rebuild(v, f"{path}.{k}", copies) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_rebuild(v, f"{path}.{i}", copies) for i, v in enumerate(value))
    return value


def _groups(session: Session) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, Any]]:
    """The tensors a checkpoint copies, by host buffer, and the optimizer's state dict they come from."""
    opt = session.optimizer.state_dict()
    named: dict[str, torch.Tensor] = {}
    _tensors(opt, "opt", named)
    return {"weights": dict(trainable(session)), "optimizer": named}, opt


def reserve(session: Session, buffers: HostBuffers) -> float:
    """The host buffers of :func:`capture` allocated ahead (once the optimizer has its state, i.e.
    after the first step); seconds taken."""
    groups, _ = _groups(session)
    return buffers.reserve(groups)


def capture(
    session: Session, buffers: HostBuffers
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(trainable weights, optimizer state dict) copied to host memory at this step boundary (an
    update that ``optimizer.overlap`` holds for the next step is applied first)."""
    session.flush()
    groups, opt = _groups(session)
    copies = buffers.copy(groups)
    return copies["weights"], _rebuild(opt, "opt", copies["optimizer"])


def schedule_to_host(session: Session) -> dict[str, Any]:
    state = session.schedule.state_dict()
    named: dict[str, torch.Tensor] = {}
    _tensors(state, "s", named)
    return _rebuild(state, "s", {k: v.detach().to("cpu", copy=True) for k, v in named.items()})


def rng_state(device: torch.device) -> dict[str, Any]:
    """This process's random states (NumPy's as plain values, so that ``weights_only`` loads them)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss),
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def numpy_state(saved: Any) -> tuple:
    """NumPy's random state as :func:`rng_state` saved it, as ``np.random.set_state`` takes it."""
    kind, keys, pos, has_gauss, gauss = saved
    return kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    random.setstate(state["python"])
    np.random.set_state(numpy_state(state["numpy"]))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def check_weights(
    params: dict[str, torch.Tensor], weights: dict[str, torch.Tensor], where: str
) -> None:
    """``ConfigError`` where a checkpoint's trainable ``weights`` are not named and shaped as the
    session's trainable ``params`` (another preset, or another ``model.freeze``)."""
    from autotune.errors import ConfigError

    missing, extra = sorted(set(params) - set(weights)), sorted(set(weights) - set(params))
    shapes = [n for n in params.keys() & weights.keys() if params[n].shape != weights[n].shape]
    if missing or extra or shapes:
        raise ConfigError(
            f"{where}: its trainable weights do not fit this configuration (missing {missing[:3]}, "
            f"unexpected {extra[:3]}, misshapen {shapes[:3]}); was it trained with another preset or "
            f"model.freeze / model.unfreeze?"
        )


@torch.no_grad()
def load_weights(session: Session, weights: dict[str, torch.Tensor], where: str) -> None:
    """Copy a checkpoint's trainable weights into the session's parameters; the names must match."""
    params = trainable(session)
    check_weights(params, weights, where)
    for n, p in session.model.named_parameters():
        if n in params:
            p.copy_(
                weights[n]
            )  # a bf16 parameter takes its master's value rounded, as the optimizer writes it
            if params[n] is not p:
                params[n].copy_(weights[n])
    session.trainable_loaded()


IMPLEMENTATION = ("foreach", "fused", "capturable", "differentiable")
"""A parameter group's flags that say how the update runs, not what it computes: this job's stay
(a checkpoint of another ``optimizer.impl`` holds that one's)."""

CONFIGURED = ("betas", "eps", "weight_decay")
"""A parameter group's hyper-parameters that this job's configuration sets: a resume on other values
trains on them (the job says so), as it does on another learning-rate schedule."""


def load_optimizer(session: Session, state: dict[str, Any]) -> None:
    """The optimizer's state, keeping each group's hyper-parameters of the kind the session made
    them: tensors (a captured step's device learning rate) the same tensors, their values set in
    place; numbers numbers (a checkpoint of another ``optimizer.impl`` may hold tensors); the
    :data:`IMPLEMENTATION` flags and :data:`CONFIGURED` values as they are."""
    opt = session.optimizer
    own = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    opt.load_state_dict(offload_state.match(opt, state))
    for group, before in zip(opt.param_groups, own):
        for key in IMPLEMENTATION:  # a flag the checkpoint's optimizer had and this one has not
            if key in group and key not in before:
                del group[key]
        for key, value in before.items():
            if key in IMPLEMENTATION or key in CONFIGURED:
                group[key] = value
            elif isinstance(value, torch.Tensor):
                value.copy_(torch.as_tensor(group[key]))
                group[key] = value
            elif isinstance(value, float) and isinstance(group.get(key), torch.Tensor):
                group[key] = group[key].item()
    _place_steps(opt)


def _place_steps(opt: torch.optim.Optimizer) -> None:
    """Each parameter's ``step`` where this optimizer's flags want it: torch's loading placed it by
    the checkpoint's (a CPU count from a non-capturable one, which a capturable or fused update
    refuses), so it is placed again by torch's rule: on the parameter's device for a capturable
    or fused group, else on the CPU, in float32."""
    for part in getattr(opt, "optimizers", lambda: [opt])():  # an offloaded one's host and device
        if isinstance(part, torch.optim.Adam | torch.optim.AdamW):  # the master's own steps stay
            _place_steps_of(part)


def _place_steps_of(opt: torch.optim.Adam | torch.optim.AdamW) -> None:
    for group in opt.param_groups:
        on_device = bool(group.get("capturable")) or bool(group.get("fused"))
        for p in group["params"]:
            step = opt.state.get(p, {}).get("step")
            if isinstance(step, torch.Tensor):
                where = p.device if on_device else torch.device("cpu")
                opt.state[p]["step"] = step.to(dtype=torch.float32, device=where)


def load_schedule(session: Session, state: dict[str, Any]) -> None:
    """The schedule's position; its shape stays the one the session built from its configuration
    (base learning rates: constant, device tensors for a captured step; warm-up, decay, length).
    The next step's learning rate is that shape's at the position: the optimizer's state brought
    the checkpoint's, which differs where the configuration changed the schedule
    (``Job._note_schedule`` says so), and each step after follows the configuration's."""
    schedule = session.schedule
    base = list(schedule.base_lrs)
    schedule.load_state_dict(offload_state.match_schedule(session.optimizer, state))
    schedule.base_lrs = base
    for group, rate, factor in zip(schedule.optimizer.param_groups, base, schedule.lr_lambdas):
        value = rate * factor(schedule.last_epoch)  # as the schedule's own step sets it
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(value)  # in place: a captured step reads this tensor
        else:
            group["lr"] = value


def learning_rate(session: Session) -> float:
    """The learning rate the next step takes (of the first parameter group)."""
    return float(session.optimizer.param_groups[0]["lr"])
