"""``python -m tests.sigterm_moments MOMENT``: ``autotune train`` whose work is replaced by a stand-in
that sends SIGTERM to its own process group at one exact moment, as a scheduler's stop would land
there by chance. Run it in a session of its own (``start_new_session``): the signal reaches all of
its group. A stop that is lost lets the stand-in run to its end, and the command exits 0.

Moments:

* ``loader-queue-1``, ``loader-queue-3``: inside a loader's start, at the 1st and 3rd queue its
  iterator makes: before the iterator's state exists, and after its first worker started.
* ``batch-pipe-del``: in a pipe's ``__del__`` as a batch is received from a worker.
* ``numpy-import``: in the import of numpy that torch's import makes from C.
* ``worker-end-as-stop-begins``: the loader's workers' SIGCHLD as the SIGTERM handler begins.
"""

from __future__ import annotations

import os
import signal
import sys
import time

RUN_S = 20.0
"""How long the stand-in runs when no stop ends it."""


def stop_group() -> None:
    os.killpg(0, signal.SIGTERM)


def at_nth_call(owner, name: str, n: int) -> None:
    """Stop the group at the ``n``-th call of ``owner.name`` (before it runs), then call it."""
    original, calls = getattr(owner, name), [0]

    def wrapper(*args, **kwargs):
        calls[0] += 1
        if calls[0] == n:
            stop_group()
        return original(*args, **kwargs)

    setattr(owner, name, wrapper)


def loader():
    """A HostLoader of toy tensor batches: 2 forked, persistent workers (autotune's defaults)."""
    import torch

    from autotune.config import DataConfig
    from autotune.data.loader import HostLoader

    class Toy(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int) -> dict:
            return {"x": torch.full((8,), float(i))}

    cfg = DataConfig()
    return HostLoader(Toy(), batch_size=4, num_workers=2, persistent_workers=True,
                      multiprocessing_context=cfg.multiprocessing_context)  # fmt: skip


def train_on(batches) -> int:
    """Take batches for :data:`RUN_S` seconds, as a training loop would."""
    end = time.monotonic() + RUN_S
    while time.monotonic() < end:
        for _ in batches:
            if time.monotonic() >= end:
                break
    return 0


def loader_queue(n: int):
    def run(args) -> int:
        import multiprocessing

        at_nth_call(multiprocessing.get_context("fork"), "Queue", n)
        return train_on(loader())

    return run


def batch_pipe_del(args) -> int:
    from multiprocessing import connection

    batches = loader()
    next(iter(batches))  # the workers run
    at_nth_call(connection._ConnectionBase, "__del__", 1)
    return train_on(batches)


def numpy_import(args) -> int:
    class Finder:  # consulted when a module is imported the first time
        def find_spec(self, name, path, target=None):
            if name == "numpy":
                sys.meta_path.remove(self)
                stop_group()

    assert "numpy" not in sys.modules
    sys.meta_path.insert(0, Finder())
    import torch  # noqa: F401

    return train_on(range(1000))


def worker_end_as_stop_begins(args) -> int:
    """The workers are ended by a SIGTERM from another process (a scheduler's: torch's worker takes
    its parent's as an order to exit 0), and their SIGCHLD comes as this process's SIGTERM handler
    begins (made then from a profile hook: Python runs it at the handler's first instruction)."""
    import multiprocessing
    import subprocess

    batches = loader()
    next(iter(batches))
    report = signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # no SIGCHLD handled before the stop
    workers = [str(p.pid) for p in multiprocessing.active_children()]
    kill = "import os, sys; [os.kill(int(pid), 15) for pid in sys.argv[1:]]"
    subprocess.run([sys.executable, "-c", kill, *workers], check=True)
    for pid in workers:
        os.waitid(os.P_PID, int(pid), os.WEXITED | os.WNOWAIT)  # ended, not reaped
    signal.signal(signal.SIGCHLD, report)
    sys.setprofile(sigchld_when_called(signal.getsignal(signal.SIGTERM)))
    os.kill(os.getpid(), signal.SIGTERM)
    return train_on(batches)


def sigchld_when_called(handler):
    """A profile hook that makes SIGCHLD for this process as ``handler`` is called."""
    import _thread

    def hook(frame, event, arg) -> None:
        if event == "call" and frame.f_code is handler.__code__:
            sys.setprofile(None)
            _thread.interrupt_main(signal.SIGCHLD)

    return hook


MOMENTS = {
    "loader-queue-1": loader_queue(1),
    "loader-queue-3": loader_queue(3),
    "batch-pipe-del": batch_pipe_del,
    "numpy-import": numpy_import,
    "worker-end-as-stop-begins": worker_end_as_stop_begins,
}


if __name__ == "__main__":
    from autotune import cli
    from autotune.train import cli as train_cli

    train_cli.run_train = MOMENTS[sys.argv[1]]  # what `train` runs, read when its parser is made
    sys.exit(cli.main(["train"]))
