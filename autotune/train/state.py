"""A session's training state in and out: trainable weights, optimizer, schedule, random states.

Taking a snapshot copies the state into host buffers that are kept between checkpoints (page-locked
on CUDA, so that the copy runs at the link's speed and the buffers are not allocated again), after
synchronising the device once; the write then runs from the copy while training goes on.
Restoring copies into the existing tensors in place (parameters, the optimizer's device
learning rate): graphs captured on them, compiled modules and the optimizer keep their addresses.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from autotune.train.session import Session


class HostBuffers:
    """Host copies of device tensors, one buffer per name, reused by every snapshot."""

    def __init__(self, device: torch.device) -> None:
        self.pin = device.type == "cuda"
        self._bufs: dict[str, torch.Tensor] = {}

    def copy(self, name: str, t: torch.Tensor) -> torch.Tensor:
        t = t.detach()
        buf = self._bufs.get(name)
        if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
            buf = self._bufs[name] = torch.empty(t.shape, dtype=t.dtype, pin_memory=self.pin)
        buf.copy_(t, non_blocking=self.pin)
        return buf


def trainable(session: Session) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in session.model.named_parameters() if p.requires_grad}


def _host(value: Any, buffers: HostBuffers, name: str) -> Any:
    if isinstance(value, torch.Tensor):
        return buffers.copy(name, value)
    if isinstance(value, dict):
        return {k: _host(v, buffers, f"{name}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_host(v, buffers, f"{name}.{i}") for i, v in enumerate(value))
    return value


def weights_to_host(session: Session, buffers: HostBuffers) -> dict[str, torch.Tensor]:
    return {n: buffers.copy(f"w.{n}", p) for n, p in trainable(session).items()}


def optimizer_to_host(session: Session, buffers: HostBuffers) -> dict[str, Any]:
    return _host(session.optimizer.state_dict(), buffers, "opt")


def schedule_to_host(session: Session) -> dict[str, Any]:
    return _host(session.schedule.state_dict(), HostBuffers(torch.device("cpu")), "sched")


def rng_state(device: torch.device) -> dict[str, Any]:
    """This process's random states (NumPy's as plain values, so that ``weights_only`` loads them)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"python": random.getstate(), "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss),
             "torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    random.setstate(state["python"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


@torch.no_grad()
def load_weights(session: Session, weights: dict[str, torch.Tensor], where: str) -> None:
    """Copy a checkpoint's trainable weights into the session's parameters; the names must match."""
    from autotune.errors import ConfigError

    params = trainable(session)
    missing, extra = sorted(set(params) - set(weights)), sorted(set(weights) - set(params))
    shapes = [n for n in params.keys() & weights.keys() if params[n].shape != weights[n].shape]
    if missing or extra or shapes:
        raise ConfigError(f"{where}: its trainable weights do not fit this configuration (missing {missing[:3]}, "
                          f"unexpected {extra[:3]}, misshapen {shapes[:3]}); was it trained with another preset or "
                          f"model.freeze / model.unfreeze?")
    for n, p in params.items():
        p.copy_(weights[n])


def load_optimizer(session: Session, state: dict[str, Any]) -> None:
    """The optimizer's state, keeping tensor hyper-parameters (a captured step's device learning
    rate) as the same tensors, their values set in place."""
    opt = session.optimizer
    kept = [{k: v for k, v in g.items() if isinstance(v, torch.Tensor)} for g in opt.param_groups]
    opt.load_state_dict(state)
    for group, tensors in zip(opt.param_groups, kept):
        for key, tensor in tensors.items():
            tensor.copy_(torch.as_tensor(group[key]))
            group[key] = tensor


def load_schedule(session: Session, state: dict[str, Any]) -> None:
    """The schedule's position; its base learning rates (constant, device tensors for a captured
    step) stay the ones the session built."""
    base = list(session.schedule.base_lrs)
    session.schedule.load_state_dict(state)
    session.schedule.base_lrs = base
