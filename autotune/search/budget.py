"""Memory budgets: ``80GiB``, ``64 GB``, ``1.5e9`` or a plain byte count; the default is the device's memory."""

from __future__ import annotations

import re

from autotune.errors import ConfigError

UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
MAX_BYTES = 2**60
"""No machine has an exabyte of memory: a budget beyond it is a typo (or an overflow)."""
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_bytes(text: str) -> int:
    """Bytes of ``text``; a bad string raises ConfigError listing the units."""
    m = _PATTERN.match(str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in UNITS:
        raise ConfigError(
            f"--memory-budget: {text!r} is not a size; allowed: a number of bytes with an optional "
            f"unit, e.g. 80GiB or 64GB (units: {sorted(k for k in UNITS if k)})"
        )
    value = float(m.group(1)) * UNITS[unit]
    if not 0 < value < MAX_BYTES:  # 1e400GiB reads as inf: no integer, no budget
        raise ConfigError(
            f"--memory-budget: {text!r} is out of range; allowed: a size > 0 and below 1 EiB"
        )
    return int(value)


def default_budget(cuda: bool) -> int:
    """The memory of one GPU with CUDA, the machine's RAM without."""
    if cuda:
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory)
    import psutil

    return int(psutil.virtual_memory().total)
