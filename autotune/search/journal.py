"""The study's journal file, written so that a crash can cut it only between two entries.

    storage = open_journal(Path("runs/x/study.journal"))   # an Optuna JournalStorage

The format is Optuna's (``JournalFileBackend``): one JSON object a line, Optuna's operations
replayed in order, so that Optuna's own backend reads these files too. What differs:

* **Appending.** Each batch of entries is one ``write`` to the file opened ``O_APPEND``, under an
  ``flock`` of the file (the kernel releases it however its holder dies). A write that fails part
  way (a full disk, a signal) is cut back to where it began: the file ends at an entry boundary.
* **A cut last line** (no newline: what a crash of the machine leaves) is never written after: the
  appender moves its bytes aside to ``study.journal.cut-OFFSET`` first, and the reader drops it
  with a warning. The complete entries before it stand.
* **A corrupt entry** anywhere else (not JSON, not an operation, an operation Optuna cannot
  replay) is a :class:`JournalError` naming the file and the line, not a traceback.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.storages.journal import BaseJournalBackend

from autotune.boundedread import check_regular
from autotune.errors import AutotuneError

ENTRY_BYTES = 64 << 20
"""The longest line read as an entry: Optuna's are a few KB (a trial's record tens of KB); a longer
line is no entry of a journal, and reading on would hold it all in memory."""
OPERATIONS = range(0, 11)
"""Optuna's journal operation codes (``JournalOperation``: CREATE_STUDY .. DISCARD_TRIALS)."""


class JournalError(AutotuneError):
    """The study's journal file holds an entry that is not a journal entry."""


def open_journal(path: Path) -> optuna.storages.JournalStorage:
    """The Optuna storage of the journal at ``path`` (created when missing)."""
    return _CheckedJournalStorage(SafeJournalFile(path))


class _CheckedJournalStorage(optuna.storages.JournalStorage):
    """Optuna's JournalStorage, with an entry it cannot replay reported as a :class:`JournalError`."""

    def _sync_with_backend(self) -> None:  # Optuna's one place where entries are replayed
        try:
            super()._sync_with_backend()
        except JournalError:
            raise
        except Exception as exc:
            backend = self._backend
            assert isinstance(backend, SafeJournalFile)
            if str(backend.last.get("worker_id", "")).startswith(self._worker_id_prefix):
                raise  # Optuna's answer to this process's own operation (DuplicatedStudyError, ...)
            line = self._replay_result.log_number_read  # another writer's entry it cannot replay
            raise JournalError(
                backend.corrupt(line, f"Optuna cannot replay it ({type(exc).__name__}: {exc})")
            ) from None


class SafeJournalFile(BaseJournalBackend):
    """The journal file's reader and appender (the contract is Optuna's ``BaseJournalBackend``).

    Reading creates and changes nothing (a run folder someone hands over may be read-only; its
    journal is data): the file is made by the first append, and a missing one reads as empty.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._cursor = (0, 0)  # (entries read, byte offset after them): Optuna reads on from there
        self._warned_at: int | None = None
        self.last: dict[str, Any] = {}
        """The entry read last (the one being replayed when replaying fails)."""

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        number, offset = self._cursor if self._cursor[0] <= log_number_from else (0, 0)
        try:
            check_regular(self.path, JournalError)  # a pipe would block the reader for ever
            f = open(self.path, "rb")  # noqa: SIM115 (closed below; a missing file has no entries)
        except FileNotFoundError:
            return
        with f:
            f.seek(offset)
            while line := f.readline(ENTRY_BYTES + 1):  # a line at a time: memory of one entry
                if not line.endswith(b"\n"):
                    self._unended(line, number, offset)
                    return
                entry = self._parse(line[:-1], number + 1)
                number, offset = number + 1, offset + len(line)
                self._cursor = (number, offset)
                if number > log_number_from:
                    self.last = entry
                    yield entry

    def _unended(self, line: bytes, number: int, offset: int) -> None:
        """The file's last line has no newline: a cut entry (a crash), or no entry at all."""
        if len(line) > ENTRY_BYTES:
            raise JournalError(
                self.corrupt(number + 1, f"longer than {ENTRY_BYTES >> 20} MiB without a newline")
            )
        if line.strip() and self._warned_at != offset:
            self._warned_at = offset
            _warn(
                f"{self.path}: its last entry (line {number + 1}, {len(line)} bytes) is cut off; it is left "
                f"out, the {number} entries before it stand"
            )

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        data = b"".join(json.dumps(log, separators=(",", ":")).encode() + b"\n" for log in logs)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            begin = self._end_at_entry(fd)
            try:
                _write_all(fd, data)
            except BaseException as exc:
                os.ftruncate(fd, begin)  # nothing of this batch stays: the file ends where it did
                if isinstance(exc, OSError):
                    raise JournalError(
                        f"{self.path}: cannot write the study's journal ({exc.strerror}); nothing of "
                        "the last change was kept, the entries before it stand"
                    ) from None
                raise
        finally:
            os.close(fd)  # also releases the flock

    def _end_at_entry(self, fd: int) -> int:
        """The file's size, after moving a cut last line aside (we hold the lock: no writer is at work)."""
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return size
        boundary = _last_line_end(fd, size)
        cut = self._keep_aside(os.pread(fd, size - boundary, boundary), boundary)
        os.ftruncate(fd, boundary)
        _warn(
            f"{self.path}: its last entry was cut off ({size - boundary} bytes without a newline); moved to {cut} "
            "before writing on"
        )
        return boundary

    def _keep_aside(self, data: bytes, boundary: int) -> Path:
        """``data`` in a new file ``study.journal.cut-BOUNDARY`` (``.1``, ``.2``, ... when that name
        is taken): never through a link, never over a file already there (an earlier cut's bytes,
        or one of a handed-over folder's)."""
        for n in itertools.count():
            cut = self.path.with_name(f"{self.path.name}.cut-{boundary}" + (f".{n}" if n else ""))
            try:  # O_EXCL fails on any name there, a link (dangling or not) included
                fd = os.open(cut, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            except FileExistsError:
                continue
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)
            return cut
        raise AssertionError("unreachable")

    def _parse(self, line: bytes, number: int) -> dict[str, Any]:
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested past Python's stack
            raise JournalError(self.corrupt(number, f"not JSON ({exc})")) from None
        if not isinstance(entry, dict) or entry.get("op_code") not in OPERATIONS:
            raise JournalError(
                self.corrupt(number, "not an Optuna journal operation (no op_code 0-10)")
            )
        return entry

    def corrupt(self, number: int, why: str) -> str:
        """The one-line message for entry (line) ``number``."""
        return (
            f"{self.path}: line {number} is not a journal entry: {why}; the {number - 1} lines before it are "
            f"intact: move the file aside, or keep them with `head -n {number - 1}`"
        )


def _last_line_end(fd: int, size: int, chunk: int = 1 << 16) -> int:
    """The offset just after the file's last newline (0 when it has none)."""
    end = size
    while end > 0:
        begin = max(0, end - chunk)
        block = os.pread(fd, end - begin, begin)
        if (i := block.rfind(b"\n")) >= 0:
            return begin + i + 1
        end = begin
    return 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _warn(message: str) -> None:
    with contextlib.suppress(OSError):
        print(f"autotune: warning: {message}", file=sys.stderr, flush=True)
