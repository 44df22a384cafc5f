"""Run a command as user ``nobody``: what a user without root's rights meets (root reads and writes
every file, whatever its permissions say)."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

GROUP = "nogroup"


def as_nobody() -> list[str]:
    """The words that run a command as ``nobody``; the test is skipped where that cannot be done
    (not root, no ``setpriv``, no such user or group)."""
    try:
        pwd.getpwnam("nobody"), grp.getgrnam(GROUP)
    except KeyError:
        pytest.skip(f"no user nobody or group {GROUP} here")
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("running a command as nobody needs root and setpriv")
    return ["setpriv", "--reuid=nobody", f"--regid={GROUP}", "--clear-groups"]


def give_to_nobody(path: Path) -> None:
    os.chown(path, pwd.getpwnam("nobody").pw_uid, grp.getgrnam(GROUP).gr_gid)


@contextlib.contextmanager
def reachable_folder() -> Iterator[Path]:
    """A new folder that ``nobody`` may enter and read but not write (pytest's ``tmp_path`` is
    inside a folder only its owner may enter)."""
    folder = Path(tempfile.mkdtemp(prefix="autotune-test-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
