"""The ``gr00t_n16`` workload: binds the replica, its batch, its loss and its data path."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from autotune.workloads.gr00t_common.workload import Gr00tWorkload
from autotune.workloads.gr00t_n16 import presets
from autotune.workloads.gr00t_n16.knobs import Gr00tModelKnobs

if TYPE_CHECKING:
    pass

REGION_NAMES = ("vision", "connector", "llm_frozen", "llm_trainable", "vlln", "dit", "projectors")


class Gr00tN16(Gr00tWorkload):
    """GR00T N1.6: SigLIP2 vision, Qwen3 LLM (top 4 layers trained), alternating DiT action head."""

    name = "gr00t_n16"
    model_knobs = Gr00tModelKnobs
    presets = tuple(presets.PRESETS)
    package = "autotune.workloads.gr00t_n16"
    model_class = "Gr00tN16Model"

    def prepare_model(self, model: nn.Module) -> None:
        model.prepare_fused_projections()
