"""``python -m tests.crashat SIGNAL EVENT NAME autotune-args...``: ``autotune`` whose process sends
itself ``SIGNAL`` (``SIGKILL``: a crash, the OOM killer; ``SIGSTOP``: a write caught in the act) at
the file operation ``EVENT`` (a Python audit event: ``os.rename``, ``os.remove``) on a path named
``NAME``, before it happens: the files on disk are those the real code wrote up to that moment."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

PATH_ARG = {"os.rename": 1, "os.remove": 0}
"""Which argument of the event is the path it names (a rename's is where the file goes)."""


def crash_at(sig: str, event: str, name: str) -> None:
    """From now on, send this process ``sig`` at ``event`` on a path named ``name``."""
    number, where = signal.Signals[sig], PATH_ARG[event]

    def hook(happening: str, args: tuple) -> None:
        if happening == event and Path(os.fsdecode(args[where])).name == name:
            os.kill(os.getpid(), number)

    sys.addaudithook(hook)


if __name__ == "__main__":
    crash_at(*sys.argv[1:4])
    from autotune.cli import main

    sys.exit(main(sys.argv[4:]))
