"""Workloads: the training jobs the tuner measures, looked up by name."""

from autotune.workloads.base import Batch, Workload
from autotune.workloads.registry import get_workload, list_workloads, register_workload

# Built-in workloads register themselves on import.
from autotune.workloads import gr00t_n16 as _gr00t_n16  # noqa: E402, F401  isort: skip

__all__ = ["Batch", "Workload", "get_workload", "list_workloads", "register_workload"]
