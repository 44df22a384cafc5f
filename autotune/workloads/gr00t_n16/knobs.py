"""GR00T N1.6's model knobs: the shared ones (:class:`Gr00tHeadKnobs`) and those of its SigLIP2
vision tower's MLP bias and frozen attention layers, each exact or to float rounding.

Declared once here; applied by the model's ``configure`` (through
:meth:`autotune.workloads.gr00t_common.workload.Gr00tWorkload.apply_model_options`).
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.config.knob import Search, knob
from autotune.workloads.gr00t_common.knobs import OWN, Gr00tHeadKnobs


@dataclass
class Gr00tModelKnobs(Gr00tHeadKnobs):
    """The ``model`` knobs of GR00T N1.6 (see the module docstring)."""

    bias_in_activation: bool = knob(
        False, group="model", search=Search("bool", remedy=True), hf=OWN
    )
    """The vision tower's MLP adds its fc1 bias in the GELU's kernel instead of the GEMM's (whose
    compiled form otherwise starts from a copy of the bias broadcast over its output). The same
    sums, rounded once less."""
    fused_frozen_qkv: bool = knob(False, group="model", search=Search("bool"), hf=OWN)
    """The frozen attention layers (vision tower, frozen LLM layers) run their query, key and value
    projections as one GEMM over a copy of the three weights side by side, made once the weights
    have their final dtype. Each output element is the same dot product. The copy is not saved;
    weights loaded into a built session (``--init-from``) refresh it. Layers converted to fp8 keep
    their own GEMMs."""
