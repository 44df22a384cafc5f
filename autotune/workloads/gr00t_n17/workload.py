"""The ``gr00t_n17`` workload: binds the N1.7 replica, its batch, its loss and its data path."""

from __future__ import annotations

from autotune.workloads.gr00t_common.knobs import Gr00tHeadKnobs
from autotune.workloads.gr00t_common.workload import Gr00tWorkload
from autotune.workloads.gr00t_n17 import presets


class Gr00tN17(Gr00tWorkload):
    """GR00T N1.7: Qwen3-VL vision and text (all frozen), VL adapter, alternating DiT action head.

    Its ``model`` knobs are those every GR00T replica has (:class:`Gr00tHeadKnobs`)."""

    name = "gr00t_n17"
    model_knobs = Gr00tHeadKnobs
    presets = tuple(presets.PRESETS)
    package = "autotune.workloads.gr00t_n17"
    model_class = "Gr00tN17Model"
