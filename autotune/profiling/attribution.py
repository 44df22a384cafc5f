"""Which step launched each device event (kernel, memcpy, memset) of a GPU trace.

By correlation first. CUPTI gives a runtime call (``cudaLaunchKernel``, ``cudaMemcpyAsync``,
``cudaGraphLaunch``, ...) a correlation id and writes the same id on the device work it launched;
Kineto copies it into ``args.correlation`` of both. A device event belongs to the step whose host
span contains the start of its call, on any host thread; a call outside every step launched work
of no step.

CUDA-graph replays need a second rule. One ``cudaGraphLaunch`` replays many kernels, which CUPTI
normally tags with the launch's id, but a trace can also hold graph kernels whose id matches no
call at all: CUPTI of CUDA 13.0 writes wrong correlation ids on ``cudaGraphLaunch`` and its
kernels in every profiling session of a process after the first (fixed in CUDA 13.1 Update 1),
and kernels may come without a correlation (or with id 0, which CUPTI never gives a call). Their stream does not help either: a replayed
graph runs on the driver's internal streams, not on the stream it was launched into. So a device
event whose correlation matches no runtime call of the trace goes to the step of the latest
graph launch that started before it, if it starts before the host ends the following step (the
host may run one step ahead of the device, not two; after the last step there is no bound).
Without graph launches in the trace, such events stay unattributed, as before.

Device work launched before the trace began is not a graph's either. CUPTI numbers correlation
ids with one counter per process, in the order of the calls, so an event whose id is below that
of every runtime call in the trace was launched by a call the trace does not hold (the host was
ahead of the device when profiling started): it belongs to no step, whatever graph launch it
happens to follow on the device's clock.

A limit: with the host a full step ahead, an uncorrelated kernel of step N that starts after
step N+1's graph launch is counted in step N+1. Windows measured by
:func:`autotune.profiling.profile_window` synchronise every step, so this cannot happen there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.profiling.kinds import Category, HostKind
from autotune.profiling.trace import RankTrace


@dataclass
class Attribution:
    """Per device event of a trace: the launching step's index and how it was found."""

    step: np.ndarray
    """Index of the step that launched the event (into the steps' arrays), -1 if none."""
    correlated: np.ndarray
    """The event's correlation id matches a runtime call of the trace (inside a step or not)."""
    via_graph_launch: np.ndarray
    """Attributed by the graph-launch rule (its correlation matched no call)."""


def _step_of(times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Index of the host span (sorted by start) containing each time, -1 if none."""
    k = np.searchsorted(starts, times, side="right") - 1
    inside = (k >= 0) & (times < ends[np.maximum(k, 0)])
    return np.where(inside, k, -1)


def _by_correlation(trace: RankTrace, starts, ends) -> tuple[np.ndarray, np.ndarray]:
    host, dev = trace.host, trace.device
    # CUPTI numbers correlations from 1: an id of 0 (or none, -1) correlates nothing.
    calls = np.flatnonzero((host.category == Category.RUNTIME) & (host.corr > 0))
    if len(calls) == 0:
        return np.full(len(dev), -1), np.zeros(len(dev), dtype=bool)
    order = np.argsort(host.corr[calls], kind="stable")
    corr = host.corr[calls][order]
    step_of_call = _step_of(host.start[calls][order], starts, ends)
    pos = np.minimum(np.searchsorted(corr, dev.corr), len(corr) - 1)
    matched = (dev.corr > 0) & (corr[pos] == dev.corr)
    return np.where(matched, step_of_call[pos], -1), matched


def _by_graph_launch(
    trace: RankTrace, host_kind: np.ndarray, events: np.ndarray, starts, ends
) -> np.ndarray:
    """Step of the latest graph launch begun before each of ``events`` started (-1: none, or too late)."""
    host = trace.host
    launches = np.flatnonzero(
        (host.category == Category.RUNTIME) & (host_kind == HostKind.GRAPH_LAUNCH)
    )
    if len(launches) == 0 or len(events) == 0:
        return np.full(len(events), -1)
    launch_start = np.sort(host.start[launches])
    launch_step = _step_of(launch_start, starts, ends)
    at = trace.device.start[events]
    j = np.searchsorted(launch_start, at, side="right") - 1
    k = np.where(j >= 0, launch_step[np.maximum(j, 0)], -1)
    # The host runs at most one step ahead: once it has ended step k + 1, step k's work has begun.
    following = k + 1
    limit = np.where(
        following < len(ends), ends[np.minimum(following, len(ends) - 1)], np.iinfo(np.int64).max
    )
    return np.where((k >= 0) & (at < limit), k, -1)


def _launched_before_trace(trace: RankTrace) -> np.ndarray:
    """Device events whose correlation id is below every runtime call's (see the module docstring)."""
    host = trace.host
    ids = host.corr[(host.category == Category.RUNTIME) & (host.corr > 0)]
    if len(ids) == 0:
        return np.zeros(len(trace.device), dtype=bool)
    corr = trace.device.corr
    return (corr > 0) & (corr < ids.min())


def attribute(
    trace: RankTrace, host_kind: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> Attribution:
    """Attribute the device events of ``trace`` to the steps whose host spans are ``[starts, ends)``.

    ``starts`` is sorted; ``host_kind`` is the :class:`HostKind` of each host event.
    """
    step, matched = _by_correlation(trace, starts, ends)
    loose = np.flatnonzero(~matched & ~_launched_before_trace(trace))
    fallback = _by_graph_launch(trace, host_kind, loose, starts, ends)
    step[loose] = fallback
    via = np.zeros(len(step), dtype=bool)
    via[loose[fallback >= 0]] = True
    return Attribution(step, matched, via)
