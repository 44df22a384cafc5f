"""A batch whose samples alone cannot fit in this host's memory is refused before anything is built.

``batch_size: 100000000`` (a typo's zeros) would otherwise grow the loader (its sampler's keys,
then the collated batch) until the host runs out of memory, minutes later, or the kernel kills
the job; on the CPU nothing predicts the steps' memory. The bound is what the batch's inputs take
(the workload's synthetic batch of one sample: the shapes and dtypes of the real data, plus the
sampler's key of each sample), times the processes on this host, against the memory available to
this process (the host's, or its cgroup's where that is lower: :mod:`autotune.memlimit`). Its steps need more: a batch
that passes may still run out of memory, one refused here cannot run.
"""

from __future__ import annotations

from typing import Any

import torch

from autotune.config import TrainConfig
from autotune.errors import ConfigError, size_text
from autotune.memlimit import memory_limit

KEY_BYTES = 200
"""What the loader holds in the main process per sample of a batch it plans: a key in a list."""


def check_batch_fits(cfg: TrainConfig, processes: int = 1) -> None:
    """ConfigError naming ``batch_size`` when ``processes`` batches of ``cfg`` exceed the memory
    available here (see the module)."""
    from autotune.config.compat import Machine, check_machine
    from autotune.config.named import checking_values
    from autotune.errors import WorkloadError
    from autotune.workloads import get_workload

    # checks of the configuration's values, as a session's (a caller names its file)
    with checking_values(WorkloadError):
        # the machine's rules first: a workload named module:Class is imported only for a
        # configuration that can run here (as a session does)
        check_machine(cfg, Machine.current(processes))
        one = get_workload(cfg.workload).synthetic_batch(
            cfg.preset, 1, "cpu", torch.Generator().manual_seed(0)
        )
    per_sample = _nbytes(one) + KEY_BYTES
    need = per_sample * cfg.batch_size * processes
    available = memory_limit().available
    if need <= available:
        return
    most = available // (per_sample * processes)
    per = f" in each of {processes} processes" if processes > 1 else ""
    raise ConfigError(
        f"batch_size: {cfg.batch_size}: its samples alone take {size_text(need)} of host memory "
        f"({size_text(per_sample)} a sample{per}), more than the {size_text(available)} available here; "
        f"allowed: at most {most} (fewer: its steps need memory too)"
    )


def _nbytes(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return batch.numel() * batch.element_size()
    if isinstance(batch, dict):
        return sum(_nbytes(v) for v in batch.values())
    if isinstance(batch, (list, tuple)):
        return sum(_nbytes(v) for v in batch)
    return 0
