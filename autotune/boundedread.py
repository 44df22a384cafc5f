"""Reading a file someone hands us (a dataset's metadata, a run folder's records, a checkpoint's
state, a trace) with a bound on its type and size.

A path that is a link to ``/dev/zero``, a FIFO or a sparse file of terabytes would otherwise be
read until memory runs out, or block for ever. :func:`read_bytes` refuses anything that is not a
regular file before opening it, refuses a file larger than the caller's limit from its size, and
never reads more than ``limit + 1`` bytes (a file that grows while read is refused too). The
error is one line naming the file and the bound, of the caller's error class (``DataError`` for a
dataset, ``ReportError`` for a run folder, ...). A missing file is left to the caller as
``FileNotFoundError`` (it usually has its own words for that).
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

from autotune.errors import AutotuneError

MiB = 1 << 20
METADATA_BYTES = 64 * MiB
"""A JSON metadata file (``info.json``, ``run.json``, ``trainer_state.json``): kilobytes in practice."""
TABLE_BYTES = 1024 * MiB
"""A JSON-lines table (``episodes.jsonl`` of a dataset of a hundred thousand episodes is ~50 MB)."""


def _size(n: int) -> str:
    return f"{n / MiB:.0f} MiB" if n >= MiB else f"{n} bytes"


def check_regular(path: str | os.PathLike, error: type[AutotuneError] = AutotuneError) -> int:
    """The size of ``path`` (links followed), which must be a regular file: a device (``/dev/zero``),
    a FIFO or a socket is refused with ``error``. ``FileNotFoundError`` when it does not exist."""
    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{path}: is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{path}: not a regular file (a device, pipe or socket); expected a file")
    return st.st_size


def read_bytes(
    path: str | os.PathLike,
    limit: int = METADATA_BYTES,
    error: type[AutotuneError] = AutotuneError,
) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (see the module docstring)."""
    size = check_regular(path, error)
    if size > limit:
        raise error(f"{path}: {_size(size)}, more than the {_size(limit)} such a file may hold")
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise error(f"{path}: more than the {_size(limit)} such a file may hold")
    return data


def read_text(
    path: str | os.PathLike,
    limit: int = METADATA_BYTES,
    error: type[AutotuneError] = AutotuneError,
) -> str:
    """:func:`read_bytes` decoded as UTF-8 (``UnicodeDecodeError``, a ``ValueError``, otherwise)."""
    return read_bytes(path, limit, error).decode("utf-8")


def read_json(
    path: str | os.PathLike,
    limit: int = METADATA_BYTES,
    error: type[AutotuneError] = AutotuneError,
) -> Any:
    """The JSON document in ``path`` (``ValueError`` when it is not JSON)."""
    return json.loads(read_text(path, limit, error))
