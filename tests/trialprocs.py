"""A trial's processes as the tests see them, found without the code under test (``procgroup``):
an executed trial's by the folder in their command lines, a forked trial's by the session its
guard leads (the guard's pid in the folder's ``session`` file)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psutil


def guard_of(folder: Path) -> int | None:
    """The guard of a trial forked from a zygote (None for an executed one, or before it wrote)."""
    try:
        return int((folder / "session").read_text())
    except (OSError, ValueError):
        return None


def trial_processes(folder: Path, session: int | None = None) -> list[int]:
    """Processes whose command line names ``folder``, and those in the session of its forked guard
    (``session``: that guard's pid, read earlier, for a folder that is gone)."""
    found = {
        int(p)
        for p in subprocess.run(
            ["pgrep", "-f", str(folder)], capture_output=True, text=True
        ).stdout.split()
    }
    session = session or guard_of(folder)
    if session is not None:
        table = subprocess.run(
            ["ps", "-e", "-o", "pid=,sid="], capture_output=True, text=True
        ).stdout.split()
        found |= {int(pid) for pid, sid in zip(table[::2], table[1::2]) if int(sid) == session}
    return sorted(found)


def children_with_commands(parent: int | None = None) -> list[tuple[psutil.Process, str]]:
    """``parent``'s children (this process's by default) with their command lines, joined; a child
    that ended while they were read (a zombie not yet reaped, or gone) is left out: a short-lived
    child (a library's subprocess) would otherwise fail the test that looked."""
    found = []
    for child in psutil.Process(parent).children():
        try:
            found.append((child, " ".join(child.cmdline())))
        except psutil.NoSuchProcess:  # ZombieProcess is one
            continue
    return found
