"""The first process of a trial: ``python -m autotune.train.guard FD FOLDER -- ARGV...``.

:func:`autotune.train.procgroup.start_trial` starts it in a session of its own, holding the read
end ``FD`` of a pipe whose write end only the tuner holds. The guard runs ``ARGV`` (the worker, or
torchrun) as its child and waits for it. When the tuner dies, however it dies (SIGKILL included),
the kernel closes the pipe: the guard then kills every process of the trial (its process group,
and every process whose environment carries the trial's marker, which keeps the loader workers
and ranks that opened sessions of their own) and removes ``FOLDER``, the trial's temporary folder.

It exits as its child did, with the same code or killed by the same signal, so that the tuner
reads the run's own status. It imports only the standard library and :mod:`procgroup` (psutil),
so it starts in tens of milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading

from autotune.train.procgroup import PID_FILE, kill_trial

_STOPPING = threading.Event()
"""Set when the tuner is gone: the child's death is then the guard's doing, not news for anyone."""


def main(argv: list[str]) -> int:
    fd, folder, sep, *command = argv
    assert sep == "--" and command, "usage: guard FD FOLDER -- ARGV..."
    child = subprocess.Popen(command)
    with open(os.path.join(folder, PID_FILE), "w") as f:  # for the kernel log's OOM lines
        f.write(str(child.pid))
    threading.Thread(target=_watch_tuner, args=(int(fd), folder), daemon=True).start()
    code = child.wait()
    if _STOPPING.is_set():  # the tuner is gone and the watcher is cleaning up: it ends this process
        threading.Event().wait()
    if code < 0:  # die of the same signal: the tuner tells SIGKILL from a crash by it
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP have no handler to reset
            signal.signal(-code, signal.SIG_DFL)
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
