"""A size-capped tmpfs of a test's own: the disk a disk-full test fills (never the machine's)."""

from __future__ import annotations

import contextlib
import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``64k``, ``12m``) mounted at ``folder``, made here; mounting needs root,
    so elsewhere the test is skipped."""
    folder.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)]
    if subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("no tmpfs can be mounted here (needs root)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(disk: Path) -> Path:
    """Fill ``disk`` to its last byte (unbuffered: nothing is left to write when the file closes);
    the filler file."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (1 << 20, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return filler
