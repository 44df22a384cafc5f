"""What a write of a checkpoint that did not finish leaves in its folder, and how the next write
there tells that from anything else.

:func:`~autotune.weights.hf.write_checkpoint` moves its files into the folder one by one, the index
last. Before the first move it puts :data:`MARKER` there, naming its host, its process and each file
it is about to move with the inode and size (which a rename keeps); the marker goes once the index
is in. A crash between the two leaves shards without their index, or an index with the marker
still beside it: every reader refuses a folder holding the marker (:func:`check_finished`). The
next write into the folder, once the process that left it is gone, removes the files the marker
names, each only while it is still the file that was moved there: never a file it did not write.

The layout before this one staged a write in ``.<name>.tmp-<pid>`` beside the folder, and a killed
write left that copy of a checkpoint there; a write into the folder removes it
(:func:`remove_old_staging`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from autotune.boundedread import read_json
from autotune.durable import fsync
from autotune.errors import DataError

MARKER = "autotune-export-unfinished.json"
"""Not hidden: whoever lists the folder sees that its files are not a whole checkpoint."""


@dataclass(frozen=True)
class Leftover:
    """The marker of a write that did not finish, as the next write into its folder finds it."""

    host: str
    pid: int
    files: list[Path]
    """The files it names that are still in the folder as they were moved there."""


def check_finished(folder: Path) -> None:
    """DataError where ``folder`` holds the files of a write that did not finish."""
    if os.path.lexists(folder / MARKER):
        raise DataError(
            f"{folder}: an export into it did not finish ({MARKER} is there): its files are not a "
            f"whole checkpoint; run that export again (autotune export D/checkpoint-N --out "
            f"{folder}), or give another folder"
        )


def begin(out: Path, staging: Path, files: list[Path]) -> None:
    """Put the marker into ``out``, naming this process and ``files`` (written and synced in
    ``staging``, about to be moved into ``out``); on disk before the first of them moves."""
    record = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "files": {f.name: _identity(f.stat()) for f in files},
    }
    written = staging / MARKER  # renamed into view whole: a crash never leaves half a marker
    written.write_text(json.dumps(record))
    fsync(written)
    written.rename(out / MARKER)
    fsync(out)


def end(out: Path) -> None:
    """The marker gone, once the files it names are all in ``out`` (the index last) or all gone."""
    (out / MARKER).unlink(missing_ok=True)
    fsync(out)


def leftover(out: Path, shown: str | os.PathLike) -> Leftover | None:
    """The marker in ``out``, None where there is none; DataError where it is not one a write put
    there (a link, a folder, another JSON), whose files cannot be told from anyone else's."""
    path = out / MARKER
    try:
        is_file = stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return None
    try:
        record = read_json(path, error=DataError) if is_file else None
    except (OSError, ValueError, DataError):
        record = None
    found = _parse(record)
    if found is None:
        raise DataError(
            f"{shown}: its {MARKER} is not the record of an export that did not finish, so which "
            "of its files that export wrote is unknown; empty the folder by hand, or give a new one"
        )
    host, pid, files = found
    return Leftover(host, pid, [out / n for n, ident in files.items() if _still(out / n, ident)])


def remove(out: Path, left: Leftover) -> None:
    """The files of an export that did not finish, then its marker (a crash in between leaves the
    marker, and the next write takes up the rest)."""
    for f in left.files:
        f.unlink(missing_ok=True)
    end(out)


def writer_alive(host: str, pid: int) -> bool:
    """Whether the write of process ``pid`` on ``host`` may still run: another host's processes are
    not seen, so they are taken to run."""
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # none, or a number past any pid
        return False
    except PermissionError:  # another user's
        pass
    return True


def remove_old_staging(out: Path) -> None:
    """The folder ``.<name>.tmp-<pid>`` beside ``out`` that a killed export of the layout before
    this one left (it staged there and renamed the folder in), removed where its process is gone,
    it is this user's and it holds regular files only; left where anything else is found (what
    cannot be removed, in a folder this user may no longer write, stays too)."""
    if not out.name:
        return
    own = re.compile(rf"\.{re.escape(out.name)}\.tmp-(\d+)\Z")
    try:
        with os.scandir(out.parent) as entries:
            found = [(e.path, int(m.group(1))) for e in entries if (m := own.match(e.name))]
    except OSError:
        return
    for path, pid in found:
        # its name has no host, so a write of another host into the same shared folder would be
        # taken for a dead one here: removing its staging fails that write (it then says so and
        # leaves nothing), which two writes into one folder at once would do anyway
        if not writer_alive(socket.gethostname(), pid) and _files_of_mine(Path(path)):
            shutil.rmtree(path, ignore_errors=True)


def _files_of_mine(folder: Path) -> bool:
    """``folder`` is a folder of this user's (not a link to one) holding only regular files of
    this user's: a checkpoint's, never a tree or a link to elsewhere."""
    try:
        with os.scandir(folder) as entries:
            stats = [os.lstat(folder), *(e.stat(follow_symlinks=False) for e in entries)]
    except OSError:
        return False
    kinds = [stat.S_ISDIR(stats[0].st_mode)] + [stat.S_ISREG(st.st_mode) for st in stats[1:]]
    return all(kinds) and all(st.st_uid == os.geteuid() for st in stats)


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size]


def _still(path: Path, identity: list[int]) -> bool:
    """``path`` is the regular file of ``identity``: not one put there since under its name."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and _identity(st) == identity


def _parse(record: object) -> tuple[str, int, dict[str, list[int]]] | None:
    """(host, pid, file name -> identity) of a marker's record; None where it is not one."""
    if not isinstance(record, dict):
        return None
    host, pid, files = record.get("host"), record.get("pid"), record.get("files")
    if not (isinstance(host, str) and _is_int(pid) and isinstance(files, dict)):
        return None
    for name, ident in files.items():
        plain = Path(name).name == name and name not in ("", ".", "..", MARKER)
        if not (plain and isinstance(ident, list) and len(ident) == 2):
            return None
        if not all(_is_int(n) for n in ident):
            return None
    return host, pid, files


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
