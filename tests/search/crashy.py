"""A test workload (``tests.search.crashy:Workload``): gr00t_n16 whose loader fails by batch size.

Batch size 3 raises in the loader (a crash), batch size 5 hangs (killed at the trial timeout),
batch size 6 hangs in two loader worker processes (a trial with a process tree), batch size 7
fills host memory (for the OOM killer of a memory-limited cgroup), batch size 4 waits 3 s (or 5
steps, where a loaded host makes steps long) for every batch (clearly slower: pruned), batch size 9
raises naming the process's temporary folder, batch size 10 prints ``$HF_TOKEN``, then 3 MiB of
output, and raises quoting it (a workload that shows a secret of its environment and floods its
log), batch size 11 raises naming a file whose name is
not UTF-8 (a lone surrogate in its message), batch size 12 waits for ``$CRASHY_RELEASE``, then prints
200 lines, makes ``$CRASHY_RELEASE.printed`` and waits for ``$CRASHY_RELEASE.more`` (a workload that prints as it goes, while its log's
disk is full); any other batch size trains like gr00t_n16. The hangs
last ``$CRASHY_HANG_S`` seconds (default an hour), or until the file ``$CRASHY_RELEASE`` exists,
after which the batch size trains like any other: the same queued trial hangs in one run and
completes in the next, and a test ends a hang as soon as it has done what the hang waits for.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import torch

from autotune.workloads.gr00t_n16.workload import Gr00tN16

CRASH, HANG, SLOW, HANG_IN_WORKERS, HOG, TEMPDIR, TOKEN, UNDECODED = 3, 5, 4, 6, 7, 9, 10, 11
CHATTY = 12


def hang_s() -> float:
    return float(os.environ.get("CRASHY_HANG_S", "3600"))


def hang(suffix: str = "") -> None:
    """Wait ``$CRASHY_HANG_S`` seconds, or until the file ``$CRASHY_RELEASE`` (+ ``suffix``) exists."""
    end = time.monotonic() + hang_s()
    release = os.environ.get("CRASHY_RELEASE")
    release = release + suffix if release else None
    while (left := end - time.monotonic()) > 0:
        if release and os.path.exists(release):
            return
        time.sleep(min(left, 0.2) if release else left)


MIRROR_PASSWORD = "m1rr0r-pw-77"
"""A password written in the workload's own message, in no environment variable."""


class Workload(Gr00tN16):
    name = "crashy"

    def make_loader(self, preset, data, batch_size, *, seed, rank=0, world_size=1):
        if batch_size == CRASH:
            raise RuntimeError("crashy: this batch size always crashes")
        if batch_size == HANG:
            hang()
        if batch_size == TEMPDIR:
            raise RuntimeError(f"crashy: tempdir={tempfile.gettempdir()}")
        if batch_size == TOKEN:
            print(f"crashy: logging in with {os.environ['HF_TOKEN']}", file=sys.stderr, flush=True)
            for i in range(3 << 14):  # 3 MiB in lines of 64 bytes
                print(f"crashy: line {i:08d} of the flood".ljust(63, "."), file=sys.stderr)
            raise RuntimeError(
                f"crashy: the hub refused the token {os.environ['HF_TOKEN']}"
                f" (mirror https://bot:{MIRROR_PASSWORD}@mirror.example.com)"
            )
        if batch_size == UNDECODED:
            name = os.fsdecode(b"episode-caf\xe9.parquet")
            raise RuntimeError(f"crashy: cannot read {name}")
        if batch_size == CHATTY:
            hang()
            try:
                for i in range(200):
                    print(f"crashy: chatting, line {i:03d}", flush=True)
            finally:  # printed, or failed to
                open(f"{os.environ['CRASHY_RELEASE']}.printed", "w").close()
                hang(".more")
        if batch_size == HANG_IN_WORKERS and hang_s() > 0:
            next(iter(torch.utils.data.DataLoader(_Hang(), batch_size=1, num_workers=2)))
        if batch_size == HOG:
            _hog = [b"\1" * (64 << 20) for _ in range(1024)]  # noqa: F841  written: the cgroup's limit stops it
        loader = super().make_loader(
            preset, data, batch_size, seed=seed, rank=rank, world_size=world_size
        )
        return _slow(loader) if batch_size == SLOW else loader


class _Hang(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        hang()
        return index


SLOW_S = 3.0
"""The least a slow batch waits; at least ``SLOW_STEPS`` times the step that used the batch before,
at most ``SLOW_MAX_S`` (a stopped process is no step)."""
SLOW_STEPS = 5
SLOW_MAX_S = 30.0


def _slow(loader):
    """``loader``'s batches, each after a wait that keeps the trial clearly slower (under half the
    best's rate, :class:`autotune.search.sampling.ClearlyWorsePruner`) on a loaded host too: there a
    step takes seconds, and a fixed 3 s wait would leave the trial within reach of the best."""
    handed = None
    for batch in loader:
        step = 0.0 if handed is None else time.monotonic() - handed  # the consumer's step
        time.sleep(min(max(SLOW_S, SLOW_STEPS * step), SLOW_MAX_S))
        handed = time.monotonic()
        yield batch
