"""The time sets ("layers") that the classifier paints steps with, for one rank.

Each layer is a merged interval set over the whole trace; a step takes the parts inside its
window. The definitions of the layers, GPU and CPU-only, are in :mod:`autotune.profiling.classify`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.profiling import intervals as iv
from autotune.profiling.kinds import Category, DeviceKind, HostKind
from autotune.profiling.nesting import innermost, nest, self_time
from autotune.profiling.trace import EventTable


@dataclass
class Layers:
    """Merged interval sets, in the priority order in which they claim time."""

    compute: iv.Intervals
    comm: iv.Intervals
    data: iv.Intervals
    launch_gaps: iv.Intervals
    """Short idle gaps between kernels (between host operators on CPU)."""
    sync: iv.Intervals
    """A host thread blocked in a synchronising call (empty on CPU)."""
    launch_host: iv.Intervals
    """A launching host thread inside an operator or a runtime call (on CPU: in :attr:`launch_gaps`)."""
    busy: iv.Intervals
    """The "device" timeline: device activity on GPU, host operators on CPU."""

    def in_priority_order(self) -> list[tuple[str, iv.Intervals]]:
        """(bucket, layer) pairs: a bucket may claim time at two priorities."""
        return [
            ("compute_serial", self.compute),
            ("comm_wait", self.comm),
            ("data_stall", self.data),
            ("launch_overhead", self.launch_gaps),
            ("sync_wait", self.sync),
            ("launch_overhead", self.launch_host),
        ]


def spans(table: EventTable, mask: np.ndarray) -> iv.Intervals:
    return iv.merge((table.start[mask], table.end[mask]))


def short_gaps(busy: iv.Intervals, max_ns: int) -> iv.Intervals:
    """Idle gaps between consecutive busy intervals that last at most ``max_ns``."""
    s, e = busy
    gs, ge = e[:-1], s[1:]
    keep = (ge - gs) <= max_ns
    return iv.make(gs[keep], ge[keep])


def gpu_layers(
    host: EventTable,
    host_kind: np.ndarray,
    device: EventTable,
    device_kind: np.ndarray,
    gap_ns: int,
    blocking: np.ndarray,
) -> Layers:
    """``blocking``: per host event, a runtime call that waits for the device
    (:func:`autotune.profiling.sync.blocking_calls`)."""
    comm_kernels = device_kind == DeviceKind.COMM
    busy = spans(device, np.ones(len(device), dtype=bool))
    # Host operators count as launching only on threads that launch device work.
    launching = np.isin(host.tid, np.unique(host.tid[host.category == Category.RUNTIME]))
    host_ops = launching & np.isin(host.category, [Category.HOST_OP, Category.RUNTIME])
    return Layers(
        compute=spans(device, ~comm_kernels),
        comm=iv.union(spans(device, comm_kernels), spans(host, host_kind == HostKind.COMM)),
        data=spans(host, host_kind == HostKind.DATA),
        launch_gaps=short_gaps(busy, gap_ns),
        sync=spans(host, blocking),
        launch_host=spans(host, host_ops),
        busy=busy,
    )


@dataclass
class HostOps:
    """Host operators with their self time, for CPU-only traces."""

    index: np.ndarray  # row in the host table
    self_ns: np.ndarray
    compute_time: iv.Intervals  # innermost operator is a compute operator


def host_ops(host: EventTable, host_kind: np.ndarray) -> HostOps:
    ops = np.flatnonzero(host.category == Category.HOST_OP)
    index, self_ns, pieces = [], [], []
    for tid in np.unique(host.tid[ops]):
        rows = ops[host.tid[ops] == tid]
        n = nest(host.start[rows], host.end[rows])
        index.append(rows[n.index])
        self_ns.append(self_time(n))
        pieces.append(innermost(n, host_kind[rows[n.index]] == HostKind.COMPUTE))
    if not index:
        return HostOps(ops, np.zeros(0, dtype=np.int64), iv.empty())
    return HostOps(np.concatenate(index), np.concatenate(self_ns), iv.union(*pieces))


def cpu_layers(
    host: EventTable, host_kind: np.ndarray, ops: HostOps, gap_ns: int, dispatch_ns: int
) -> Layers:
    data = spans(host, host_kind == HostKind.DATA)
    compute_ops = ops.index[host_kind[ops.index] == HostKind.COMPUTE]
    start = host.start[compute_ops]
    dispatch = iv.merge((start, np.minimum(start + dispatch_ns, host.end[compute_ops])))
    busy = spans(host, host.category == Category.HOST_OP)
    return Layers(
        compute=iv.subtract(iv.subtract(ops.compute_time, dispatch), data),
        comm=spans(host, host_kind == HostKind.COMM),
        data=data,
        launch_gaps=iv.union(busy, short_gaps(busy, gap_ns)),
        sync=iv.empty(),
        launch_host=iv.empty(),
        busy=busy,
    )
