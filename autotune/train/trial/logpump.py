"""A trial's output on its way to its log file: secrets hidden, its size bounded.

    pump = LogPump(log_path)
    start_trial(argv, ..., log=pump.writer)   # the trial's stdout and stderr
    pump.started()                            # the trial holds its own copies of the pipe
    ...
    pump.close()                              # after the trial's processes are gone

The trial writes into a pipe; a thread copies it line by line into the file. Each line loses what
:func:`autotune.redact.hide_secrets` hides (a token the workload prints, a URL's password), since
the log is a file autotune writes. The file keeps the first ``HEAD`` bytes as they come and the
last ``TAIL`` (a failure's report is at the end); what lies between is left out with a line that
says how much, so a workload that floods its output cannot fill the disk. A write the disk refuses
(full) ends the log there, and the pipe is drained to its end all the same: a trial whose pipe
closed would die at its next print, a failure that is not its configuration's.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from pathlib import Path
from typing import BinaryIO

from autotune.redact import environment_secrets, hide_secrets

HEAD = 1 << 20
"""Bytes kept from the start of the output (written as they come: the log can be followed)."""
TAIL = 1 << 20
"""Bytes kept from its end (held in memory until the trial ends)."""
LINE = 64 << 10
"""The longest piece read as one line: a line without newlines is cut into pieces of this size."""
JOIN_S = 10.0
"""How long ``close`` waits for the copy to end (an orphan still holding the pipe is not waited for)."""


def _scrubbed(line: bytes, secrets: list[str]) -> bytes:
    text = line.decode("utf-8", "surrogateescape")
    return hide_secrets(text, secrets).encode("utf-8", "surrogateescape")


class LogPump:
    """The pipe a trial writes its output into, and the thread that copies it into ``path``."""

    def __init__(self, path: str | os.PathLike) -> None:
        self._file: BinaryIO | None = _fresh(Path(path))  # closed by the copying thread
        self._secrets = environment_secrets()  # the trial's environment is this process's
        read_end, write_end = os.pipe()
        self.writer = os.fdopen(write_end, "wb", buffering=0)
        """The trial's stdout and stderr (a file object: the warm parent passes its descriptor on)."""
        self._reader = os.fdopen(read_end, "rb", buffering=0)
        self._thread = threading.Thread(target=self._copy, name="autotune-trial-log", daemon=True)
        self._thread.start()

    def started(self) -> None:
        """The trial has its copy of the pipe: ours closes, so the copy ends when the trial's do."""
        if not self.writer.closed:
            self.writer.close()

    def close(self) -> None:
        self.started()
        self._thread.join(JOIN_S)

    def _copy(self) -> None:
        head, tail, tail_bytes, dropped = 0, collections.deque(), 0, 0
        try:
            while line := self._reader.readline(LINE):
                line = _scrubbed(line, self._secrets)
                if head + len(line) <= HEAD and not tail:
                    self._write(line)
                    head += len(line)
                    continue
                tail.append(line)
                tail_bytes += len(line)
                while tail_bytes - len(tail[0]) >= TAIL:
                    tail_bytes -= len(tail[0])
                    dropped += len(tail.popleft())
            if dropped:
                self._write(f"[... {dropped} bytes of output left out ...]\n".encode())
            self._write(b"".join(tail))
        finally:
            self._reader.close()
            self._close_file()

    def _write(self, data: bytes) -> None:
        """Into the log, until a write fails (a full disk): the log ends there, and the pipe is still
        drained to its end, since a trial whose pipe closed would die of it at its next print."""
        if self._file is None:
            return
        try:
            self._file.write(data)
            self._file.flush()
        except OSError:  # the log is not the trial's result
            self._close_file()

    def _close_file(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):  # the last flush, on a full disk
                self._file.close()
            self._file = None


def _fresh(path: Path) -> BinaryIO:
    """``path`` opened for writing as a new file: a link there, or another name of someone's file
    (in a run folder handed over), is replaced, never written through."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(path, flags, 0o644), "wb")


def open_log(path: str | os.PathLike | None) -> LogPump | None:
    """The pump into ``path``, or None where the trial's output goes nowhere."""
    return LogPump(Path(path)) if path else None
