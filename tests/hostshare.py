"""The host shared by the suite's pytest-xdist workers, the tests that must have it to themselves,
and the session's folders that one worker makes for all.

Every test holds a shared lock on the host while it runs, with its fixtures' setup and teardown; a
test marked ``exclusive`` (one that compares a run on a busy host with one on a quiet host) holds it
alone, so the other workers wait between their tests while it runs. An exclusive test that waits
first takes a gate that keeps new tests from starting, so it is not starved. Without xdist (one
process) the locks are not taken.

The locks are ``flock`` locks on files in the session's shared temporary folder, held through a file
descriptor of each worker's own: the kernel drops them when a worker dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path


def shared_root(basetemp: Path) -> Path | None:
    """The folder that all of the session's workers share (None without xdist)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return None
    return basetemp.parent  # each worker's basetemp is a folder of the session's own


class HostShare:
    """One worker's share of the host: :meth:`held` around each test."""

    def __init__(self, root: Path) -> None:
        self._gate = os.open(root / "host.gate", os.O_RDWR | os.O_CREAT, 0o600)
        self._host = os.open(root / "host.lock", os.O_RDWR | os.O_CREAT, 0o600)

    @contextlib.contextmanager
    def held(self, exclusive: bool) -> Iterator[None]:
        fcntl.flock(self._gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._host, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            if not exclusive:  # an exclusive test keeps the gate, and new tests out, until it ends
                fcntl.flock(self._gate, fcntl.LOCK_UN)
            try:
                yield
            finally:
                fcntl.flock(self._host, fcntl.LOCK_UN)
        finally:
            fcntl.flock(self._gate, fcntl.LOCK_UN)  # (a no-op where it was let go above)


def made_once(basetemp_factory, name: str, make: Callable[[Path], None]) -> Path:
    """A folder of the session that ``make`` fills, made once however many workers ask: the first
    makes it while the others wait on its lock (a failed ``make`` leaves it for the next to try)."""
    root = shared_root(basetemp_factory.getbasetemp())
    if root is None:
        folder = basetemp_factory.mktemp(name)
        make(folder)
        return folder
    folder, done = root / name, root / f"{name}.done"
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            done.touch()
    return folder
