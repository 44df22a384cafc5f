"""Reading the files of a dataset: JSON, JSON lines and parquet, each problem one line naming the file."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from autotune.boundedread import METADATA_BYTES, TABLE_BYTES, read_text
from autotune.errors import CONTROL, DataError, kind_of, short_repr


def one_line(exc: BaseException) -> str:
    """A library's message on one line (pyarrow's and FFmpeg's span several)."""
    return " ".join(str(exc).split())


class _NotFinite(ValueError):
    pass


class _TooDeep(ValueError):
    pass


def _no_constant(name: str) -> Any:
    """JSON has no NaN or Infinity (Python's parser accepts them): a metadata number is finite."""
    raise _NotFinite(f"holds {name}; allowed: finite numbers")


def _loads(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:  # arrays nested past Python's stack: no metadata is shaped so
        raise _TooDeep("nests arrays or objects deeper than Python can parse") from None


_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
    stat.S_IFSOCK: "a socket",
}


def present(path: Path) -> bool:
    """Whether anything is at ``path``: an optional file that is there but is not a file (a
    folder, a pipe, a broken link) is an error to report, not a file to do without."""
    return os.path.lexists(path)


def require_file(path: Path) -> None:
    """``path`` must be a regular file (links followed); otherwise a :class:`DataError` saying
    what is there instead: a pipe is not "missing", and reading it would block for ever."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            raise DataError(
                f"{path}: a link to {os.readlink(path)}, which does not exist"
            ) from None
        raise DataError(f"{path}: missing") from None
    except OSError as exc:  # a loop of links, a folder that cannot be searched
        raise DataError(f"{path}: cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        raise DataError(
            f"{path}: is {_KINDS.get(stat.S_IFMT(mode), 'not a regular file')}, not a file"
        )


def _read(path: Path, limit: int) -> str:
    """The text of a metadata file: a regular file of at most ``limit`` bytes, UTF-8."""
    require_file(path)
    try:
        return read_text(path, limit, DataError)
    except FileNotFoundError:  # removed since it was looked at
        raise DataError(f"{path}: missing") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot be read ({one_line(exc)})") from None


def read_json(path: Path) -> Any:
    text = _read(path, METADATA_BYTES)
    try:
        return _loads(text)
    except (_NotFinite, _TooDeep) as exc:
        raise DataError(f"{path}: {exc}") from None
    except ValueError as exc:
        raise DataError(f"{path}: not a readable JSON file ({one_line(exc)})") from None


def read_jsonl(path: Path) -> list[dict]:
    lines = _read(path, TABLE_BYTES).splitlines()
    rows = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                row = _loads(line)
            except (_NotFinite, _TooDeep) as exc:
                raise DataError(f"{path}: line {n} {exc}") from None
            except ValueError as exc:
                raise DataError(f"{path}: line {n} is not JSON ({one_line(exc)})") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}: line {n} is not a JSON object")
            rows.append(row)
    return rows


def get(obj: Any, key: str, path: Path, kind: type | tuple[type, ...], where: str = "") -> Any:
    """``obj[key]``, which must exist and be of ``kind`` (a bool is never an int here)."""
    if not isinstance(obj, dict):
        what = where.rstrip(".") or "the file"
        raise DataError(f"{path}: {what} is {kind_of(obj)}, not a JSON object")
    if key not in obj:
        raise DataError(f"{path}: missing key {where}{key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        name = getattr(kind, "__name__", None) or " or ".join(k.__name__ for k in kind)
        raise DataError(f"{path}: {where}{key!r} is {short_repr(value)}, not of type {name}")
    return value


def printable_names(names: Iterable[tuple[str, object]], path: Path) -> None:
    """Refuse a name of the folder's metadata (``(where, name)``; a name that is no text is left
    to its reader) that holds a control character: the views and keys are printed (``data check``,
    ``run``'s data line, notes), and an escape sequence in one acts on the terminal."""
    for where, name in names:
        if isinstance(name, str) and CONTROL.search(name):
            raise DataError(
                f"{path}: {where} is {short_repr(name)}, which holds a control character; "
                "allowed: printable text"
            )


def parquet_file(path: Path) -> pq.ParquetFile:
    require_file(path)
    try:
        return pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: not a readable parquet file ({one_line(exc)})") from None


def read_parquet(path: Path, columns: list[str] | None = None) -> pa.Table:
    """The table of ``path`` (only ``columns``, each of which must exist)."""
    file = parquet_file(path)
    require_columns(file, columns or [], path)
    try:
        return file.read(columns=columns)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: not a readable parquet file ({one_line(exc)})") from None


def require_columns(file: pq.ParquetFile, columns: list[str], path: Path) -> None:
    names = file.schema_arrow.names
    missing = [c for c in columns if c not in names]
    if missing:
        raise DataError(f"{path}: missing column {missing[0]!r} (columns: {names})")
    twice = [c for c in columns if names.count(c) > 1]
    if twice:  # which of them is the column? pyarrow refuses to say
        raise DataError(
            f"{path}: column {twice[0]!r} appears {names.count(twice[0])} times; allowed: one column "
            "of each name"
        )


def read_rows(
    file: pq.ParquetFile, path: Path, columns: list[str], start: int, stop: int
) -> pa.Table:
    """Rows ``[start, stop)`` of ``columns``, reading only the row groups that hold them.

    A v3.0 data file holds many episodes (lerobot writes one row group per episode), so an
    episode costs the row groups it spans, not the whole file.
    """
    meta = file.metadata
    groups, first, offset = [], None, 0
    for g in range(meta.num_row_groups):
        rows = meta.row_group(g).num_rows
        if offset + rows > start and offset < stop:
            groups.append(g)
            first = offset if first is None else first
        offset += rows
    if stop > offset:
        raise DataError(f"{path}: has {offset} rows; rows [{start}, {stop}) were expected in it")
    try:
        table = file.read_row_groups(groups, columns=columns)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: not a readable parquet file ({one_line(exc)})") from None
    return table.slice(start - (first or 0), stop - start)
