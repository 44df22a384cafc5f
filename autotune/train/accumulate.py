"""Gradient accumulation: an update's batch cut into micro-batches (``memory.accumulation_steps``)."""

from __future__ import annotations

import torch

from autotune.errors import ConfigError
from autotune.workloads import Batch, Workload


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


def shares(workload: Workload, parts: list[Batch]) -> list[torch.Tensor | float]:
    """Each micro-batch's share of the update's loss: its :meth:`Workload.loss_weight` over their sum,
    so the weighted losses add up to the whole batch's mean (a masked mean weighs each micro-batch by
    its unmasked targets, not equally). Equal shares where the workload gives no weight or every
    weight is zero. Stays on the device: no host sync."""
    n = len(parts)
    weights = [workload.loss_weight(p) for p in parts]
    if n == 1 or any(w is None for w in weights):
        return [1.0 / n] * n
    total = torch.stack(weights).sum()
    return [torch.where(total > 0, w / total.clamp_min(1e-12), 1.0 / n) for w in weights]
