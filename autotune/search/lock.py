"""One tuner per run folder: ``RUN/run.lock``, held with ``flock`` while ``autotune run`` works there.

    with hold_folder(Path("runs/x")):   # or ConfigError: runs/x is in use by autotune run (pid ...)
        ...

The kernel drops an flock when its holder exits, however it exits (SIGKILL too), so a killed
tuner never leaves a stale lock behind. The file names its holder (host, pid, since, command) for
the one line a second tuner on the same folder is refused with. Workers that share a study
through ``--storage`` each use a folder of their own.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from autotune.errors import ConfigError

LOCK = "run.lock"


@contextmanager
def hold_folder(folder: Path) -> Iterator[None]:
    """Create ``folder`` if needed and hold its lock while the body runs."""
    fd = _open_lock(folder)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                f"{folder} is in use by {_holder(fd)}: wait for it to end, or give another --out "
                "(to add a worker to the same study, use --storage and a folder of its own)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_me()).encode(), 0)
        yield
    finally:
        os.close(
            fd
        )  # releases the lock; the file stays (removing it would race a tuner opening it)


def _open_lock(folder: Path) -> int:
    if folder.exists() and not folder.is_dir():
        raise ConfigError(
            f"--out {folder}: is a file, not a folder; give a folder for the run (it is created if needed)"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(
            f"--out {folder}: cannot write there ({exc.strerror}); give a folder you can write"
        ) from None


def _me() -> dict[str, object]:
    since = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "since": since,
        "command": " ".join(sys.argv),
    }


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 65536, 0) or b"{}")
        return f"autotune run (pid {info['pid']} on host {info['host']}, since {info['since']})"
    except (OSError, ValueError, KeyError, TypeError):  # the holder is writing it this very moment
        return "another autotune run"
