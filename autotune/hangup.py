"""A hang-up (SIGHUP: the ssh session dropped, the terminal closed) stops a command as SIGTERM does.

Which signals ask for that stop is :func:`stop_requests`: SIGHUP but where it is ignored, as
``nohup`` leaves it (the user asked that a hang-up not stop the command; a handler set over that
would undo it). Signal dispositions survive ``exec``, so the check at a process's start sees it.

A hang-up takes away what read the command's output: the terminal, which fails every write with
EIO from then on, or the ``tee`` the output was piped into, which the same SIGHUP ends (EPIPE). A
line printed on the way out (the report's path, the command's last line, Python's flush of stdout
at exit) would then raise in the middle of the clean-up, or end the process with "Exception
ignored ... OSError" and exit 120. :func:`output_may_be_gone`, called as a stop begins, points
each standard stream whose terminal has hung up at /dev/null, below Python's file objects, so
that every writer (print, logging, tqdm, C code) goes on unharmed; and it has ``sys.stdout`` and
``sys.stderr`` drop what they cannot write for want of a reader. Where the reader is still there
(``kill -HUP``, SIGTERM) every line still reaches it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys

try:
    import termios
except ImportError:  # Windows: no terminals that hang up, and no SIGHUP
    termios = None

STREAMS = (1, 2)
"""stdout and stderr: a read of a hung-up terminal (stdin) only ends, as at the end of a file."""

READER_GONE = frozenset({errno.EIO, errno.EPIPE})
"""A write's errors that say its reader has gone: a terminal hung up, a pipe's reader ended."""


def stop_requests() -> tuple[int, ...]:
    """The signals whose handlers ask this process to stop cleanly: SIGTERM, and SIGHUP where it is
    not ignored already (see the module docstring)."""
    hangup = getattr(signal, "SIGHUP", None)
    if hangup is None or signal.getsignal(hangup) in (signal.SIG_IGN, None):
        return (signal.SIGTERM,)
    return (signal.SIGTERM, hangup)


def output_may_be_gone() -> None:
    """The command is stopping, maybe for a hang-up: its last lines must not fail on a reader that
    has gone (see the module docstring). Called from a stop signal's handler."""
    _leave_terminal()
    sys.stdout = _forgiving(sys.stdout)
    sys.stderr = _forgiving(sys.stderr)


def _leave_terminal() -> None:
    gone = [fd for fd in STREAMS if _hung_up(fd)]
    if not gone:
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in gone:
            os.dup2(null, fd)
    finally:
        os.close(null)


def _hung_up(fd: int) -> bool:
    """Whether ``fd`` is a terminal that has hung up: the kernel answers its requests with EIO from
    then on (a descriptor that is no terminal answers ENOTTY)."""
    if termios is None:
        return False
    try:
        termios.tcgetattr(fd)
    except termios.error as exc:
        return exc.args[0] == errno.EIO
    return False


class _Forgiving:
    """A standard stream that drops what it cannot write for want of a reader; anything else is
    the stream's own."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        with _reader_gone_dropped():
            self._stream.write(text)
        return len(text)

    def flush(self) -> None:
        with _reader_gone_dropped():
            self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _forgiving(stream):
    """``stream`` as a :class:`_Forgiving` (None, where Python runs without one, stays None)."""
    return stream if stream is None or isinstance(stream, _Forgiving) else _Forgiving(stream)


@contextlib.contextmanager
def _reader_gone_dropped():
    try:
        yield
    except OSError as exc:
        if exc.errno not in READER_GONE:
            raise
