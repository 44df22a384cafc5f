"""Memory budgets: ``80GiB``, ``64 GB``, ``1.5e9`` or a plain byte count; the default is the
device's memory (on a CPU, what this process may use: :mod:`autotune.memlimit`)."""

from __future__ import annotations

from autotune.memlimit import memory_limit
from autotune.train.memcap import GPUS, budget_of, parse_bytes

__all__ = ["GPUS", "budget_of", "default_budget", "parse_bytes"]


def default_budget(cuda: bool) -> tuple[int, str]:
    """The memory of one GPU with CUDA; without, the memory this process may use (the machine's,
    or its cgroup's limit where that is lower). With where it comes from where that is not the
    device itself (``the cgroup's limit``; else empty)."""
    if cuda:
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory), ""
    limit = memory_limit()
    return limit.total, limit.origin
