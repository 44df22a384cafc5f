"""Files on disk before they are visible: what a crash must not leave half-written.

A rename makes a file visible at once, but its bytes (and the rename) may still sit in the page
cache; after a power loss the file can be there, empty or cut. :func:`sync_folder` is called on a
folder of files written in full before any of them is renamed into view, and :func:`fsync` on the
folder the renames went to.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync(path: Path) -> None:
    """Flush ``path`` (a file, or a folder's entries) to its disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_folder(folder: Path) -> None:
    """Every file in ``folder``, then the folder itself, flushed to disk."""
    for p in folder.iterdir():
        fsync(p)
    fsync(folder)
