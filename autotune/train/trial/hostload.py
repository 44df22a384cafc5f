"""How busy the host is with other work, read just before a run starts its processes.

A run measured while other processes compete for the CPUs (another study, a test suite, a compile
in the background) is slower, or steadier but slower, for reasons that are not its configuration's:
the reading goes into the run's record (:class:`~autotune.train.trial.record.HostLoad`), and the tuner
does not take such a run's number on its word (``autotune.search.noise``).
"""

from __future__ import annotations

import os
import time

import psutil

from autotune.train.trial.record import HostLoad

PROBE_S = 0.3
"""Long enough for the kernel's CPU-time counters (10 ms ticks) to say something, short beside a run."""


def _busy_and_total(times) -> tuple[float, float]:
    """(busy, total) CPU seconds of ``psutil.cpu_times()``; guest time is already inside user time."""
    fields = times._asdict()
    total = sum(v for k, v in fields.items() if k not in ("guest", "guest_nice"))
    idle = fields.get("idle", 0.0) + fields.get("iowait", 0.0)
    return total - idle, total


def _own_seconds(process: psutil.Process) -> float:
    t = process.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def read_host_load(probe_s: float = PROBE_S) -> HostLoad:
    """CPU time other processes used over ``probe_s`` seconds (steal time included: on a VM it is
    another guest's load), as a share of all CPUs, and the 1-minute load average per CPU."""
    cpus = psutil.cpu_count() or os.cpu_count() or 1
    me = psutil.Process()
    start = time.perf_counter()
    busy0, total0 = _busy_and_total(psutil.cpu_times())
    own0 = _own_seconds(me)
    time.sleep(probe_s)
    busy1, total1 = _busy_and_total(psutil.cpu_times())
    own1 = _own_seconds(me)
    total = total1 - total0
    others = max(0.0, (busy1 - busy0) - (own1 - own0))
    share = min(1.0, others / total) if total > 0 else 0.0
    return HostLoad(
        others_busy=share,
        load_average=os.getloadavg()[0] / cpus,
        cpus=cpus,
        probe_s=time.perf_counter() - start,
    )
