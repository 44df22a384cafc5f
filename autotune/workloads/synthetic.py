"""An endless loader of synthetic batches: measurements without any I/O."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from autotune.workloads.base import Batch, Workload


class SyntheticLoader:
    """Yields ``workload.synthetic_batch`` on the CPU forever, from a seeded generator."""

    def __init__(self, workload: Workload, preset: str, batch_size: int, seed: int = 0) -> None:
        self.workload, self.preset, self.batch_size = workload, preset, batch_size
        self.generator = torch.Generator().manual_seed(seed)

    def __iter__(self) -> Iterator[Batch]:
        while True:
            yield self.workload.synthetic_batch(self.preset, self.batch_size, "cpu", self.generator)
