"""A device-memory budget for a training process: the user's smaller card emulated on a bigger one.

The tuner (``run --memory-budget``/``--gpu``) and ``train`` pass the budget to every training
process in :data:`BUDGET_ENV`. On CUDA the process caps its caching allocator when its session
starts (:func:`apply_cap`): ``torch.cuda.set_per_process_memory_fraction`` of the device's total,
less what the process already holds outside the allocator (the CUDA context, loaded kernels), so
that the allocator's reserved memory plus that context reach the budget where a card of that size
would run out. An allocation beyond it raises CUDA's out-of-memory error, as on the real card.

What is emulated: the allocator's reserved memory (fragmentation included) and the context present
when the cap is set. What is not: device memory taken outside the allocator after that (NCCL's
buffers, kernels loaded later, cuDNN and cuBLAS handles' own memory), a real card's memory lost to
ECC and the driver (pass the card's usable memory as ``--memory-budget`` to count it), other
processes on the device, and everything that is not memory: the card's compute, bandwidth and
interconnect (samples/s stay those of the machine that measured them).

On a CPU no allocator cap exists: the process's measured peak (its peak resident set) is checked
against the budget after the measured window (:func:`check_peak`), and a run over it fails as
out of memory with its peak.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.errors import ConfigError, TrialError

if TYPE_CHECKING:  # torch is imported where a device is used: parsing a budget must not pay for it
    import torch

BUDGET_ENV = "AUTOTUNE_MEMORY_BUDGET"
"""Bytes of device memory each training process may use (unset: no cap)."""

GPUS: dict[str, int] = {
    "rtx4090": 24 * 2**30,
    "l40": 48 * 2**30,
    "a6000": 48 * 2**30,
    "a100-40": 40 * 2**30,
    "a100-80": 80 * 2**30,
    "rtxpro6000": 96 * 2**30,
}
"""Common cards' nominal memory (``--gpu NAME``)."""

GPU_HELP = (
    "emulate this card's memory: the budget is its nominal memory "
    f"({', '.join(f'{k} {v // 2**30} GiB' for k, v in GPUS.items())}); only memory is "
    "emulated: the card's compute, memory bandwidth and interconnect are not (samples/s are this "
    "machine's), nor memory lost to ECC and the driver (give --memory-budget for that)"
)

UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
MAX_BYTES = 2**60
"""No machine has an exabyte of memory: a budget beyond it is a typo (or an overflow)."""
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_bytes(text: str, flag: str = "--memory-budget") -> int:
    """Bytes of ``text`` (``80GiB``, ``64 GB``, ``1.5e9``); a bad string raises ConfigError listing
    the units."""
    m = _PATTERN.match(str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in UNITS:
        raise ConfigError(
            f"{flag}: {text!r} is not a size; allowed: a number of bytes with an optional "
            f"unit, e.g. 80GiB or 64GB (units: {sorted(k for k in UNITS if k)})"
        )
    value = float(m.group(1)) * UNITS[unit]
    # 1e400GiB reads as inf: no integer, no budget; under one byte (0.0001KiB) is a budget of 0
    if not 1 <= value < MAX_BYTES:
        raise ConfigError(
            f"{flag}: {text!r} is out of range; allowed: a size of at least 1 byte and below 1 EiB"
        )
    return int(value)


def budget_of(memory_budget: str | None, gpu: str | None) -> int | None:
    """The budget the command line asks for: ``--memory-budget`` over ``--gpu``; None: neither.
    Each flag given is checked, the one overruled included."""
    if gpu is not None and gpu.lower() not in GPUS:
        raise ConfigError(f"--gpu: {gpu!r} is not a known card; allowed: {sorted(GPUS)}")
    if memory_budget is not None:
        return parse_bytes(memory_budget)
    return None if gpu is None else GPUS[gpu.lower()]


def budget_from_env(env: Mapping[str, str] = os.environ) -> int | None:
    text = env.get(BUDGET_ENV)
    return parse_bytes(text, BUDGET_ENV) if text else None


@dataclass(frozen=True)
class Cap:
    """The budget a process runs under, and how it was applied."""

    budget_bytes: int
    outside_bytes: int = 0
    """Device memory the process held outside the caching allocator when the cap was set (CUDA)."""
    fraction: float | None = None
    """The allocator's limit as a fraction of the device's total (None on a CPU)."""


_current: dict[str, tuple[Cap, Any]] = {}


def apply_cap(device: torch.device, budget: int | None) -> Cap | None:
    """Cap this process's allocator on ``device`` at ``budget`` (see the module docstring)."""
    if budget is None:
        return None
    cap = Cap(budget)
    if device.type == "cuda":
        import torch

        free, total = torch.cuda.mem_get_info(device)
        outside = max(0, total - free - torch.cuda.memory_reserved(device))
        fraction = max(0.0, min(1.0, (budget - outside) / total))
        torch.cuda.set_per_process_memory_fraction(fraction, device)
        cap = Cap(budget, outside, fraction)
    _current["cap"] = (cap, device)
    return cap


def peak_bytes(device: torch.device, cap: Cap | None = None) -> int:
    """The process's peak as the budget counts it: the allocator's peak reserved memory plus the
    memory outside it on CUDA; the peak resident set on a CPU."""
    if device.type == "cuda":
        import torch

        outside = cap.outside_bytes if cap is not None else 0
        return int(torch.cuda.max_memory_reserved(device)) + outside
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_peak() -> tuple[int, int] | None:
    """(peak, budget) of this process where it runs under a cap; None otherwise."""
    if "cap" not in _current:
        return None
    cap, device = _current["cap"]
    return peak_bytes(device, cap), cap.budget_bytes


class OverBudget(TrialError):
    """A run whose measured peak exceeded the memory budget: out of memory on the card emulated."""

    def __init__(
        self, peak: int, budget: int, trained: tuple[list[float], list[float]] | None = None
    ) -> None:
        super().__init__(
            f"out of memory: peak {peak / 2**30:.2f} GiB over the memory budget "
            f"{budget / 2**30:.2f} GiB",
            "oom",
        )
        self.peak_bytes, self.budget_bytes = peak, budget
        self.trained = trained
        """(losses, gradient norms) of a run that trained to its end before its peak was checked."""


def check_peak(
    peak: int, budget: int | None, trained: tuple[list[float], list[float]] | None = None
) -> None:
    """Raise :class:`OverBudget` where ``peak`` exceeds ``budget``; ``trained``: the run's losses and
    gradient norms, kept in its failure (loss parity can still use what it computed)."""
    if budget is not None and peak > budget:
        raise OverBudget(peak, budget, trained)
