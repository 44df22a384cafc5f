"""Output of a command that a hang-up takes away, as an ssh session's drop does.

:func:`start_attached` runs a command in a session of its own (so that a signal to its process
group reaches nothing of the test's), with SIGHUP as a terminal's job has it (a suite started
under ``nohup`` would pass its SIG_IGN on), writing to :class:`Output`: a pseudo-terminal, or a
pipe into the test as into ``| tee``. :meth:`Output.hang_up` closes the test's end: the terminal
hangs up (every write to it fails with EIO from then on) or the pipe loses its reader (EPIPE), as
``tee`` ends on the same SIGHUP; then the shell's SIGHUP to its job's process group follows.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading

KINDS = ("terminal", "pipe")


class Output:
    """The test's end of a terminal or a pipe (``kind``, one of :data:`KINDS`): what the command
    writes there is read all along (a full one would block its writes), into :attr:`text`."""

    def __init__(self, kind: str) -> None:
        self._ours, self.theirs = os.openpty() if kind == "terminal" else os.pipe()
        self._chunks: list[bytes] = []
        self._open = True
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while self._open:
            if select.select([self._ours], [], [], 0.05)[0]:
                try:
                    chunk = os.read(self._ours, 65536)
                except OSError:  # EIO: the command closed its end of the terminal
                    return
                if not chunk:  # the command closed its end of the pipe
                    return
                self._chunks.append(chunk)

    @property
    def text(self) -> str:
        """What the command wrote so far (a terminal's CRLF line ends as LF)."""
        return b"".join(self._chunks).decode(errors="replace").replace("\r\n", "\n")

    def hang_up(self, proc: subprocess.Popen) -> None:
        """Take the output away, then send SIGHUP to ``proc``'s process group, as a shell does to
        its jobs when its terminal goes."""
        self._open = False
        self._reader.join()
        os.close(self._ours)
        os.killpg(proc.pid, signal.SIGHUP)


def start_attached(
    argv: list[str], kind: str = "terminal", stdout: int | None = None, **popen: object
) -> tuple[subprocess.Popen, Output]:
    """Start ``argv`` with its stdin (for a terminal), stdout and stderr on an :class:`Output` of
    ``kind`` (see the module docstring); ``stdout``: elsewhere (``subprocess.PIPE``: a result the
    test reads)."""
    output = Output(kind)
    try:
        proc = subprocess.Popen(
            argv,
            stdin=output.theirs if kind == "terminal" else subprocess.DEVNULL,
            stdout=output.theirs if stdout is None else stdout,
            stderr=output.theirs,
            start_new_session=True,
            preexec_fn=_hang_up_stops,
            **popen,
        )
    finally:
        os.close(output.theirs)
    return proc, output


def _hang_up_stops() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
