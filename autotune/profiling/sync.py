"""Runtime calls that block the host until the device catches up, and where they were made.

A call blocks by contract (:data:`HostKind.SYNC`: ``cudaDeviceSynchronize``,
``cudaStreamSynchronize``, ``cudaEventSynchronize``, a plain ``cudaMemcpy``, their driver and HIP
twins) or because its copy touches pageable host memory: ``cudaMemcpyAsync`` to or from pageable
memory returns only once the stream has reached the copy and the data has moved (the driver
stages it through a pinned buffer). Kineto names such copies ``Memcpy DtoH (Device -> Pageable)``
and ``Memcpy HtoD (Pageable -> Device)``; the call is found by its correlation id. ``.cpu()``,
``.item()``, ``.tolist()``, ``print`` of a CUDA tensor and a ``.to("cuda")`` of unpinned memory
all end in such a call.

While a host thread is blocked in one, every kernel before it has been issued: if the device is
idle then, the host is not late in launching (the classifier's ``sync_wait``, not
``launch_overhead``), and the remedy is to remove the synchronisation, not to launch faster.
"""

from __future__ import annotations

import re

import numpy as np

from autotune.profiling.kinds import Category, HostKind
from autotune.profiling.result import SyncSite
from autotune.profiling.trace import RankTrace

PAGEABLE_COPY = re.compile(r"^Memcpy .*Pageable")
TOP_SITES = 5


def blocking_calls(trace: RankTrace, host_kind: np.ndarray) -> np.ndarray:
    """Whether each host event is a runtime call that blocks until the device catches up."""
    host, dev = trace.host, trace.device
    runtime = host.category == Category.RUNTIME
    pageable = np.fromiter(
        (bool(PAGEABLE_COPY.search(n)) for n in trace.names), bool, len(trace.names)
    )
    copy_ids = dev.corr[pageable[dev.name] & (dev.corr > 0)]
    by_copy = runtime & (host_kind == HostKind.LAUNCH) & np.isin(host.corr, copy_ids)
    return (runtime & (host_kind == HostKind.SYNC)) | by_copy


def _outermost_ops(trace: RankTrace, calls: np.ndarray) -> list[str | None]:
    """Name of the outermost host operator containing each call's start on its thread."""
    host = trace.host
    under: list[str | None] = [None] * len(calls)
    ops = np.flatnonzero(host.category == Category.HOST_OP)
    for tid in np.unique(host.tid[calls]):
        mine = ops[host.tid[ops] == tid]
        mine = mine[np.lexsort((-host.end[mine], host.start[mine]))]
        if len(mine) == 0:
            continue
        # Top level: an operator that starts once everything before it has ended.
        reach = np.maximum.accumulate(host.end[mine])
        top = mine[np.r_[True, host.start[mine][1:] >= reach[:-1]]]
        at = np.flatnonzero(host.tid[calls] == tid)
        t = host.start[calls[at]]
        k = np.searchsorted(host.start[top], t, side="right") - 1
        inside = (k >= 0) & (t < host.end[top][np.maximum(k, 0)])
        for j, kk, ok in zip(at, k, inside):
            if ok:
                under[j] = trace.names[host.name[top[kk]]]
    return under


def sync_sites(
    trace: RankTrace, blocking: np.ndarray, in_steps: np.ndarray
) -> dict[tuple, list[int]]:
    """Blocking calls made inside steps (``in_steps``: per host event), per (call, outermost operator):
    [total ns, count]."""
    calls = np.flatnonzero(blocking & in_steps)
    under = _outermost_ops(trace, calls)
    sites: dict[tuple, list[int]] = {}
    dur = trace.host.end[calls] - trace.host.start[calls]
    for i, op, ns in zip(calls, under, dur):
        site = sites.setdefault((trace.names[trace.host.name[i]], op), [0, 0])
        site[0] += int(ns)
        site[1] += 1
    return sites


def top_sites(parts: list[dict[tuple, list[int]]]) -> tuple[SyncSite, ...]:
    """The sites with the most blocked host time over all ranks, largest first."""
    total: dict[tuple, list[int]] = {}
    for sites in parts:
        for key, (ns, n) in sites.items():
            t = total.setdefault(key, [0, 0])
            t[0] += ns
            t[1] += n
    ranked = sorted(total, key=lambda k: (-total[k][0], k[0], k[1] or ""))[:TOP_SITES]
    return tuple(SyncSite(k[0], k[1], total[k][0], total[k][1]) for k in ranked)
