"""The result of classifying a run's traces: one object, rendered as text or JSON elsewhere.

Times are kept as integer nanoseconds (so the buckets of a step add up to its time exactly) and
converted to milliseconds or fractions only by the ``to_dict`` methods and properties.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Output order. The *priority* in which a slice of time is claimed is a different order
# (classify.py's docstring).
BUCKETS = ("compute_serial", "comm_wait", "launch_overhead", "sync_wait", "data_stall", "other")

_NS_PER_MS = 1e6


def _ms(ns: float) -> float:
    return ns / _NS_PER_MS


def median(values) -> float:
    """The median of an iterable of numbers (numpy's: the ``statistics`` module costs the CLI's start)."""
    return float(np.median(np.fromiter(values, dtype=np.float64)))


def fractions(buckets_ns: dict[str, int]) -> dict[str, float]:
    whole = sum(buckets_ns.values())
    return {b: (buckets_ns[b] / whole if whole else 0.0) for b in BUCKETS}


def dominant(buckets_ns: dict[str, int]) -> str:
    return max(BUCKETS, key=lambda b: buckets_ns[b])


def add_buckets(parts: list[dict[str, int]]) -> dict[str, int]:
    return {b: sum(p[b] for p in parts) for b in BUCKETS}


@dataclass(frozen=True)
class StepResult:
    """One ``ProfilerStep#N`` of one rank: its window and where the window's time went."""

    step: int
    start_ns: int
    """Start of the step's host span (trace clock)."""
    end_ns: int
    """End of the later of the host span and the device work the step launched."""
    buckets_ns: dict[str, int]
    """Time of the window per bucket; sums to ``end_ns - start_ns`` exactly."""
    kernels: int
    """Device kernels (memcpy, memset included) launched by the step; on CPU, compute operators."""

    @property
    def time_ns(self) -> int:
        return self.end_ns - self.start_ns

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "step_time_ms": _ms(self.time_ns),
            "buckets_ms": {b: _ms(self.buckets_ns[b]) for b in BUCKETS},
            "kernels": self.kernels,
        }


@dataclass(frozen=True)
class RankResult:
    """The steps of one rank's trace."""

    rank: int
    path: str
    steps: tuple[StepResult, ...]

    @property
    def buckets_ns(self) -> dict[str, int]:
        return add_buckets([s.buckets_ns for s in self.steps])

    @property
    def step_time_ms(self) -> float:
        return _ms(median(s.time_ns for s in self.steps))

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "path": self.path,
            "buckets": fractions(self.buckets_ns),
            "dominant": dominant(self.buckets_ns),
            "step_time_ms": self.step_time_ms,
            "steps": len(self.steps),
            "per_step": [s.to_dict() for s in self.steps],
        }


@dataclass(frozen=True)
class KernelStat:
    """Time of one kernel name (one host operator's self time on CPU-only traces) in the steps."""

    name: str
    total_ns: int
    count: int
    share: float
    """Fraction of the total time of all kernels (all compute operators' self time on CPU)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "total_ms": _ms(self.total_ns),
            "count": self.count,
            "share": self.share,
        }


@dataclass(frozen=True)
class SyncSite:
    """One blocking call, by name and the outermost operator it was made in, over the steps."""

    call: str
    under: str | None
    """Outermost host operator around the call on its thread (None: called outside operators,
    or a trace recorded without operators)."""
    total_ns: int
    """Host time spent inside these calls (while the device ran, or sat idle)."""
    count: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "call": self.call,
            "under": self.under,
            "total_ms": self.total_ns / 1e6,
            "count": self.count,
        }


@dataclass(frozen=True)
class LaunchStats:
    kernels_per_step: float
    """Median number of kernels a step launches (compute operators on CPU)."""
    median_launch_gap_us: float
    """Median idle gap between consecutive kernels (between host operators on CPU) in steps."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernels_per_step": self.kernels_per_step,
            "median_launch_gap_us": self.median_launch_gap_us,
        }


@dataclass(frozen=True)
class Straggler:
    """The rank with the largest median step time, against the median of the other ranks."""

    rank: int
    step_time_ms: float
    others_step_time_ms: float

    @property
    def excess_ms(self) -> float:
        return self.step_time_ms - self.others_step_time_ms

    def to_dict(self) -> dict[str, Any]:
        others = self.others_step_time_ms
        return {
            "rank": self.rank,
            "step_time_ms": self.step_time_ms,
            "others_step_time_ms": others,
            "excess_ms": self.excess_ms,
            "excess_fraction": self.excess_ms / others if others else 0.0,
        }


@dataclass(frozen=True)
class ClassifyResult:
    """Where the steps of a run went, per rank and over all ranks."""

    device: str
    """``"gpu"`` when the traces hold device activity, else ``"cpu"`` (CPU analogues)."""
    ranks: tuple[RankResult, ...]
    top_kernels: tuple[KernelStat, ...]
    launch: LaunchStats
    straggler: Straggler | None
    options: dict[str, float] = field(default_factory=dict)
    sync_calls: tuple[SyncSite, ...] = ()
    """The blocking runtime calls with the most host time inside steps, largest first."""
    notes: tuple[str, ...] = ()
    """What the classifier inferred about the traces that a reader should know (one line each)."""

    @property
    def buckets_ns(self) -> dict[str, int]:
        return add_buckets([r.buckets_ns for r in self.ranks])

    @property
    def buckets(self) -> dict[str, float]:
        return fractions(self.buckets_ns)

    @property
    def dominant(self) -> str:
        return dominant(self.buckets_ns)

    @property
    def step_time_ms(self) -> float:
        return _ms(median(s.time_ns for r in self.ranks for s in r.steps))

    @property
    def steps(self) -> int:
        return len({s.step for r in self.ranks for s in r.steps})

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "buckets": self.buckets,
            "dominant": self.dominant,
            "step_time_ms": self.step_time_ms,
            "steps": self.steps,
            "ranks": [r.to_dict() for r in self.ranks],
            "straggler": self.straggler.to_dict() if self.straggler else None,
            "top_kernels": [k.to_dict() for k in self.top_kernels],
            "launch": self.launch.to_dict(),
            "sync_calls": [c.to_dict() for c in self.sync_calls],
            "notes": list(self.notes),
            "options": dict(self.options),
        }
