"""Gradient accumulation: an update's batch cut into micro-batches (``memory.accumulation_steps``)."""

from __future__ import annotations

from autotune.errors import ConfigError
from autotune.workloads import Batch


def micro_batches(batch: Batch, steps: int) -> list[Batch]:
    """``batch`` cut along its first dimension into ``steps`` micro-batches of equal size, in order
    (views: nothing is copied). One step: the batch itself."""
    if steps == 1:
        return [batch]
    sizes = {k: v.shape[0] if v.dim() else None for k, v in batch.items()}
    size = next(iter(sizes.values()), None)
    if size is None or any(n != size for n in sizes.values()) or size % steps:
        raise ConfigError(
            f"memory.accumulation_steps: {steps} cannot cut this batch (first dimensions "
            f"{sizes}); allowed: a divisor of the batch's samples, every entry batched first"
        )
    parts = {k: v.split(size // steps) for k, v in batch.items()}
    return [{k: parts[k][i] for k in batch} for i in range(steps)]
