"""One owner per run or job folder: ``D/run.lock``, held with ``flock`` while ``autotune run --out D``
or ``autotune train --output-dir D`` works there.

    with own_folder(Path("runs/x"), "autotune run", "--out"):
        ...   # or ConfigError: runs/x is in use by autotune run (pid 123 on host h, since ...)

The kernel drops an flock when its holder exits, however it exits (SIGKILL too), so the lock of a
dead owner is stale and the next one takes it over (a forked child, such as a loader worker,
closes its copy of the lock at once, so none keeps a dead owner's lock). The file names its owner
(what, host, pid, since, and the command line through :func:`autotune.redact.redact_argv`, so no
password) for the one line a second owner is refused with; only its owner's user may read it (mode 0600). It is
removed when the owner is done; a newcomer that opened the file just before checks, once it holds
the lock, that the file it locked is still the one at the path (else it tries again), so two owners
never hold two files.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from autotune.errors import ConfigError
from autotune.redact import redact_argv

LOCK = "run.lock"
_HELD: set[int] = set()
"""Descriptors of the locks this process holds: a forked child (a loader worker) closes its copies,
so that the lock goes when its owner dies, not when the owner's last child does."""


def _close_in_child() -> None:
    for fd in _HELD:
        with suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_close_in_child)
MODE = 0o600
ATTEMPTS = 20
"""Times a newcomer tries again when the file it locked was removed under it (its owner ended)."""


@contextmanager
def own_folder(folder: Path, what: str, flag: str, hint: str = "") -> Iterator[None]:
    """Create ``folder`` if needed and own it while the body runs: ``what`` (``autotune run``) is
    how the file names this owner, ``flag`` the option a refused user changes. A folder it created
    that holds nothing at the end (the command failed before writing) is removed again."""
    created = not folder.exists()
    try:
        fd = _take(folder, what, flag, hint)
    except ConfigError:
        if created:
            with suppress(OSError):
                folder.rmdir()
        raise
    _HELD.add(fd)
    try:
        yield
    finally:
        with suppress(OSError):  # removed before the lock is let go: no newcomer finds it empty
            os.unlink(folder / LOCK)
        if created:
            with suppress(OSError):  # only while empty: rmdir never removes what someone wrote
                folder.rmdir()
        _HELD.discard(fd)
        os.close(fd)  # lets the lock go


def _take(folder: Path, what: str, flag: str, hint: str) -> int:
    for _ in range(ATTEMPTS):
        fd = _open(folder, flag)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise ConfigError(
                f"{folder} is in use by {holder}: wait for it to end, or give another {flag}{hint}"
            ) from None
        if _same_file(fd, folder / LOCK):
            try:
                os.fchmod(fd, MODE)  # a file left by an older version may be readable by all
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(_me(what)).encode(), 0)
            except OSError as exc:  # a full disk: no empty lock file is left to puzzle over
                with suppress(OSError):
                    os.unlink(folder / LOCK)
                os.close(fd)
                raise ConfigError(
                    f"{flag} {folder}: cannot write its {LOCK} ({exc.strerror}); give a folder you "
                    "can write"
                ) from None
            return fd
        os.close(fd)  # its owner removed it as it ended: lock the new one
    raise ConfigError(f"{folder}: its {LOCK} keeps changing; is another program removing it?")


def _open(folder: Path, flag: str) -> int:
    if folder.exists() and not folder.is_dir():
        raise ConfigError(
            f"{flag} {folder}: is a file, not a folder; give a folder (it is created if needed)"
        )
    _check_lock_is_a_file(folder, flag)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, MODE)
    except OSError as exc:
        raise ConfigError(
            f"{flag} {folder}: cannot write there ({exc.strerror}); give a folder you can write"
        ) from None


def _check_lock_is_a_file(folder: Path, flag: str) -> None:
    """A link, folder, pipe or device under the lock's name (in a folder handed over) is no lock of
    ours: refused naming what it is, never followed or waited on."""
    try:
        mode = os.lstat(folder / LOCK).st_mode
    except OSError:  # nothing there (or no folder yet): the lock is made
        return
    if stat.S_ISREG(mode):
        return
    kind = (
        "a link"
        if stat.S_ISLNK(mode)
        else "a folder"
        if stat.S_ISDIR(mode)
        else "a pipe, device or socket"
    )
    raise ConfigError(
        f"{flag} {folder}: its {LOCK} is {kind}, not the lock file autotune makes there (no autotune "
        f"process holds it): remove it, or give another {flag}"
    )


def _same_file(fd: int, path: Path) -> bool:
    try:
        here, there = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino) and stat.S_ISREG(here.st_mode)


def _me(what: str) -> dict[str, object]:
    since = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return {
        "what": what,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "since": since,
        "command": " ".join(redact_argv(sys.argv)),
    }


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 65536, 0) or b"{}")
        what = info.get("what", "autotune run")
        return f"{what} (pid {info['pid']} on host {info['host']}, since {info['since']})"
    # being written right now (or not the owner's record: nested past Python's stack, ...)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return "another autotune process"
