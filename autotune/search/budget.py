"""Memory budgets: ``80GiB``, ``64 GB``, ``1.5e9`` or a plain byte count; the default is the device's memory."""

from __future__ import annotations

from autotune.train.memcap import GPUS, budget_of, parse_bytes

__all__ = ["GPUS", "budget_of", "default_budget", "parse_bytes"]


def default_budget(cuda: bool) -> int:
    """The memory of one GPU with CUDA, the machine's RAM without."""
    if cuda:
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory)
    import psutil

    return int(psutil.virtual_memory().total)
