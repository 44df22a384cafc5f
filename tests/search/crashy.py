"""A test workload (``tests.search.crashy:Workload``): gr00t_n16 whose loader fails by batch size.

Batch size 3 raises in the loader (a crash), batch size 5 hangs (killed at the trial timeout),
batch size 4 waits 3 s for every batch (clearly slower: pruned); any other batch size trains
like gr00t_n16.
"""

from __future__ import annotations

import time

from autotune.workloads.gr00t_n16.workload import Gr00tN16

CRASH, HANG, SLOW = 3, 5, 4


class Workload(Gr00tN16):
    name = "crashy"

    def make_loader(self, preset, data, batch_size, *, seed, rank=0, world_size=1):
        if batch_size == CRASH:
            raise RuntimeError("crashy: this batch size always crashes")
        if batch_size == HANG:
            time.sleep(3600)
        loader = super().make_loader(preset, data, batch_size, seed=seed, rank=rank, world_size=world_size)
        return _slow(loader) if batch_size == SLOW else loader


def _slow(loader):
    for batch in loader:
        time.sleep(3.0)
        yield batch
