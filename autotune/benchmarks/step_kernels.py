"""Device time of each profiled step of a trace, by kind of kernel, with the step's idle time.

A step's device events are those its host span launched
(:func:`autotune.profiling.classify.device_steps`: by correlation id, and a CUDA graph's kernels
by its launch), on every stream: kernels, copies and sets. Per step:

* per kind (:mod:`autotune.benchmarks.kernel_kinds`): the events' summed durations and count;
* ``span``: from the start of the step's first event to the end of its last;
* ``busy``: the union of its events' intervals (the time some stream runs something);
* ``idle``: ``span - busy``, the gaps inside the span where no stream runs anything. Each gap is
  put down once to the kind of the event that ends it (``idle_before``: the device waited to
  start that kind of work) and once to the kind of the event whose end began it
  (``idle_after``). In a CUDA graph a gap is the latency between two nodes;
* ``concurrent``: ``kernel time - busy``, time counted twice because events on several streams ran
  at once. The kinds sum to ``busy + concurrent``;
* per kind, ``beside``: the time its events ran while an event of another kind ran on another
  stream (an optimizer update beside the next step's GEMMs shows here, or does not).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autotune.benchmarks.kernel_kinds import KERNEL_TABLE, KernelKind
from autotune.errors import TraceFormatError
from autotune.profiling import intervals as iv
from autotune.profiling.classify import device_steps
from autotune.profiling.kinds import kinds_of
from autotune.profiling.trace import load_trace

KINDS = tuple(KernelKind)


@dataclass(frozen=True)
class StepKernels:
    """One step's device time in nanoseconds; per-kind tuples are indexed by :class:`KernelKind`."""

    step: int
    """The N of ``ProfilerStep#N``."""
    kind_ns: tuple[int, ...]
    kind_count: tuple[int, ...]
    idle_before_ns: tuple[int, ...]
    """Idle gaps inside the span, each put down to the kind of the event that ends it."""
    idle_after_ns: tuple[int, ...]
    """The same gaps, each put down to the kind of the event whose end began it."""
    busy_ns: int
    span_ns: int
    beside_ns: tuple[int, ...] = ()
    """Per kind, the time its events ran while an event of another kind ran."""

    @property
    def kernel_ns(self) -> int:
        return sum(self.kind_ns)

    @property
    def idle_ns(self) -> int:
        return self.span_ns - self.busy_ns

    @property
    def concurrent_ns(self) -> int:
        return self.kernel_ns - self.busy_ns


@dataclass(frozen=True)
class TraceKernels:
    """The profiled steps of one trace that ran device work."""

    path: Path
    steps: tuple[StepKernels, ...]

    def mean_ms(self, value: Callable[[StepKernels], int]) -> float:
        """The mean over steps of ``value(step)`` (nanoseconds), in milliseconds."""
        return float(np.mean([value(s) for s in self.steps])) / 1e6

    def mean_count(self, kind: KernelKind) -> float:
        return float(np.mean([s.kind_count[kind] for s in self.steps]))


def one_step(step: int, start: np.ndarray, end: np.ndarray, kind: np.ndarray) -> StepKernels:
    """The figures of one step from its events' start and end (ns) and :class:`KernelKind`."""
    order = np.argsort(start, kind="stable")
    start, end, kind = start[order], end[order], kind[order]
    reach = np.maximum.accumulate(end)
    # An event that starts after everything before it has ended ends a gap (as iv.merge groups);
    # the gap began at the end of the event that reached furthest before it.
    gap = np.maximum(start[1:] - reach[:-1], 0)
    furthest = np.maximum.accumulate(np.where(end == reach, np.arange(len(end)), 0))
    n = len(KINDS)
    return StepKernels(
        step=step,
        kind_ns=_per_kind(kind, end - start, n),
        kind_count=tuple(int(c) for c in np.bincount(kind, minlength=n)),
        idle_before_ns=_per_kind(kind[1:], gap, n),
        idle_after_ns=_per_kind(kind[furthest[:-1]], gap, n),
        busy_ns=iv.total(iv.merge((start, end))),
        span_ns=int(reach[-1] - start[0]),
        beside_ns=_beside(start, end, kind, n),
    )


def _beside(start: np.ndarray, end: np.ndarray, kind: np.ndarray, n: int) -> tuple[int, ...]:
    """Per kind, the union of its events' intervals that another kind's events also cover."""
    out = []
    for k in range(n):
        mine = kind == k
        if not mine.any() or mine.all():
            out.append(0)
            continue
        own = iv.merge((start[mine], end[mine]))
        others = iv.merge((start[~mine], end[~mine]))
        out.append(iv.total(iv.intersect(own, others)))
    return tuple(out)


def _per_kind(kind: np.ndarray, ns: np.ndarray, n: int) -> tuple[int, ...]:
    # int64 sums per kind: exact, unlike bincount's float weights.
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, kind, ns)
    return tuple(int(x) for x in out)


def trace_kernels(path: str | Path) -> TraceKernels:
    """Read one rank's trace file and measure its profiled steps; refuses a trace without
    device work, or with fewer than two profiled steps that ran any."""
    path = Path(path)
    trace = load_trace(path)
    numbers, dev_step = device_steps(trace)
    if len(trace.device) == 0:
        raise TraceFormatError(
            f"{path}: no kernels (a CPU-only trace); the table compares GPU kernel time: "
            "profile with ProfilerActivity.CUDA"
        )
    dev = trace.device
    kind = kinds_of(KERNEL_TABLE, trace.names)[dev.name].astype(np.int64)
    steps = tuple(
        one_step(int(numbers[i]), dev.start[mine], dev.end[mine], kind[mine])
        for i in range(len(numbers))
        if (mine := dev_step == i).any()
    )
    if len(steps) < 2:
        which = f"one profiled step (ProfilerStep#{steps[0].step})" if steps else "no profiled step"
        raise TraceFormatError(
            f"{path}: {which} ran kernels; the table is per step over several: profile at least "
            "2 steps (torch.profiler.schedule(active=2) or more)"
        )
    return TraceKernels(path, steps)
