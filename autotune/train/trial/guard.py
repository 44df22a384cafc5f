"""The first process of a trial: ``python -m autotune.train.trial.guard FD FOLDER -- ARGV...``.

:func:`autotune.train.trial.procgroup.start_trial` starts it in a session of its own, holding the read
end ``FD`` of a pipe whose write end only the tuner holds. The guard runs ``ARGV`` (the worker, or
torchrun) as its child and waits for it. When the tuner dies, however it dies (SIGKILL included),
the kernel closes the pipe: the guard then kills every process of the trial (its process group,
and every process whose environment carries the trial's marker, which keeps the loader workers
and ranks that opened sessions of their own) and removes ``FOLDER``, the trial's temporary folder.

It exits as its child did, with the same code or killed by the same signal, so that the tuner
reads the run's own status. It imports only the standard library and :mod:`procgroup` (psutil),
so it starts in tens of milliseconds. :mod:`autotune.train.trial.zygote` forks the same guard
(:func:`guard`) with a forked worker as its child.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

from autotune.train.trial.procgroup import PID_FILE, kill_trial

_STOPPING = threading.Event()
"""Set when the tuner is gone: the child's death is then the guard's doing, not news for anyone."""


def main(argv: list[str]) -> int:
    fd, folder, sep, *command = argv
    assert sep == "--" and command, "usage: guard FD FOLDER -- ARGV..."
    children: list[
        subprocess.Popen
    ] = []  # held: a collected Popen may reap the child behind our waitpid
    return guard(
        int(fd), folder, lambda: children.append(subprocess.Popen(command)) or children[0].pid
    )


def guard(fd: int, folder: str, start: Callable[[], int]) -> int:
    """Start the trial's child (``start`` returns its pid), watch the tuner's pipe ``fd``, and end as
    the child did: the same exit code, or killed by the same signal (so that the tuner tells SIGKILL
    from a crash by it). Shared by the executed guard and the one a zygote forks."""
    child = start()
    with open(os.path.join(folder, PID_FILE), "w") as f:  # for the kernel log's OOM lines
        f.write(str(child))
    threading.Thread(target=_watch_tuner, args=(fd, folder), daemon=True).start()
    try:
        _, status = os.waitpid(child, 0)
        code = os.waitstatus_to_exitcode(status)
    except (
        ChildProcessError
    ):  # the watcher killed it and reaped it first (psutil waits on what it kills)
        code = -signal.SIGKILL
    if _STOPPING.is_set():  # the tuner is gone and the watcher is cleaning up: it ends this process
        threading.Event().wait()
    if code < 0:
        with contextlib.suppress(
            OSError, ValueError
        ):  # SIGKILL and SIGSTOP have no handler to reset
            signal.signal(-code, signal.SIG_DFL)
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), -code)
    return code


def _watch_tuner(fd: int, folder: str) -> None:
    while os.read(fd, 1):  # the tuner never writes: this returns only at EOF, when it is gone
        pass
    _STOPPING.set()
    kill_trial(folder, spare=os.getpid())
    shutil.rmtree(folder, ignore_errors=True)
    os._exit(128 + signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
