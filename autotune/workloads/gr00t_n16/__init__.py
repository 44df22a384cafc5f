"""The default workload: a randomly initialised replica of GR00T N1.6 at its real size."""

from autotune.workloads.gr00t_n16.knobs import Gr00tModelKnobs
from autotune.workloads.gr00t_n16.presets import PRESETS, Gr00tPreset, get_preset
from autotune.workloads.gr00t_n16.workload import Gr00tN16
from autotune.workloads.registry import register_workload

register_workload(Gr00tN16())

__all__ = ["PRESETS", "Gr00tModelKnobs", "Gr00tN16", "Gr00tPreset", "get_preset"]
