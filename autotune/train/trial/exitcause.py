"""Why a run's processes ended without a result: the exit code or signal, and whether the OOM killer acted.

A process killed by SIGKILL is recorded as out of memory only when the kernel says that its OOM
killer acted: the ``oom_kill`` counter of the tuner's memory cgroup (cgroup v2 ``memory.events``,
v1 ``memory.oom_control``; a trial's processes inherit the tuner's cgroup) grew while the run ran,
or the kernel log (``/dev/kmsg``, where readable) names one of the run's processes in an OOM line.
Otherwise it is ``killed by SIGKILL`` (a user, a scheduler, a watchdog), never a guess.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Iterable
from pathlib import Path

_KMSG_OOM = re.compile(rb"(?:Killed process |oom-kill:.*\bpid=)(\d+)")
_TORCHRUN_EXIT = re.compile(r"exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)")
STOPPING = {signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}
"""Signals that stop a process from outside; others (SIGSEGV, SIGABRT, SIGBUS) are its own crash."""


def oom_kills() -> int | None:
    """The ``oom_kill`` counter of this process's memory cgroup; None where it cannot be read."""
    for path in _oom_counter_files():
        with contextlib.suppress(OSError, ValueError):
            for line in path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    return None


def _oom_counter_files() -> list[Path]:
    """Where the counter may be: under this process's cgroup, then at the top of its mount (inside
    a cgroup namespace ``/proc/self/cgroup`` names paths the mount does not have)."""
    from autotune.memlimit import memory_cgroups

    files = [
        where / names.events for folder, top, names in memory_cgroups() for where in (folder, top)
    ]
    return [f for f in files if f.is_file()]


def kernel_oom_pids() -> set[int] | None:
    """The pids the kernel log says the OOM killer killed; None where the log cannot be read."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    pids: set[int] = set()
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BrokenPipeError:  # records overwritten while reading: go on with the next
                continue
            except (BlockingIOError, OSError):
                break
            if not record:
                break
            pids.update(int(m.group(1)) for m in _KMSG_OOM.finditer(record))
    finally:
        os.close(fd)
    return pids


def killed_by_oom(oom_before: int | None, pids: Iterable[int]) -> bool | None:
    """Whether the OOM killer acted during the run; None when the kernel gave no way to know."""
    after = oom_kills()
    if oom_before is not None and after is not None and after > oom_before:
        return True
    logged = kernel_oom_pids()
    if logged is not None and logged & set(pids):
        return True
    return None if after is None and logged is None else False


def exit_failure(
    code: int, *, oom_before: int | None, pids: Iterable[int] = (), log_text: str = ""
) -> tuple[str, str]:
    """(reason, message) of a run that ended with exit code ``code`` and no result.

    With torchrun (``code`` 1 and its failure report in ``log_text``) the failed rank's own exit
    status is read from the report.
    """
    pids = set(pids)
    where = ""
    if code > 0 and (rank := _TORCHRUN_EXIT.search(log_text)) and int(rank.group(1)) < 0:
        code, where = int(rank.group(1)), f" (a rank, pid {rank.group(2)})"
        pids.add(int(rank.group(2)))
    if code >= 0:
        return "crash", f"the run exited with code {code} without a result"
    name = _signal_name(-code)
    if -code == signal.SIGKILL:
        oom = killed_by_oom(oom_before, pids)
        if oom:
            return "oom", f"killed by the kernel's OOM killer{where} (out of host memory)"
        known = "" if oom is None else ", not by the OOM killer"
        return "killed", f"killed by SIGKILL{where}{known}"
    return ("killed" if -code in STOPPING else "crash"), f"killed by {name}{where}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
