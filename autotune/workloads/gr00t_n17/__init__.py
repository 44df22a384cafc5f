"""GR00T N1.7: a randomly initialised replica of ``nvidia/GR00T-N1.7-3B`` at its real size."""

from autotune.workloads.gr00t_n17.presets import PRESETS, Gr00tN17Preset, get_preset
from autotune.workloads.gr00t_n17.workload import Gr00tN17
from autotune.workloads.registry import register_workload

register_workload(Gr00tN17())

__all__ = ["PRESETS", "Gr00tN17", "Gr00tN17Preset", "get_preset"]
