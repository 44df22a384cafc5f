"""GR00T N1.6's model knobs: how its layers compute, never what (each exact or to float rounding).

Declared once here, as the fields of :class:`Gr00tModelKnobs`; a configuration's ``model`` mapping
reads them beside ``freeze`` and ``unfreeze`` (:mod:`autotune.config.workload_knobs`). Applied by
:meth:`autotune.workloads.gr00t_n16.workload.Gr00tN16.apply_model_options`
(``Gr00tN16Model.configure``).
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.config.knob import NotCarried, Search, knob, validate

CATEGORY_MATMULS = ("gather", "grouped")

_OWN = NotCarried(
    "it changes how autotune's GR00T layers compute; the Trainer runs the model as it was built "
    "(build it with autotune.prepare to keep it)"
)


@dataclass
class Gr00tModelKnobs:
    """The ``model`` knobs of GR00T N1.6 (see the module docstring)."""

    skip_dead_work: bool = knob(False, group="model", search=Search("bool", remedy=True), hf=_OWN)
    """Skip work whose output never reaches the loss: the LM-head logits, which upstream computes
    and discards, and the action decoder on the state token. Exact: no loss or gradient changes."""
    category_matmul: str = knob(
        "gather",
        group="model",
        choices=CATEGORY_MATMULS,
        search=Search("categorical", choices=CATEGORY_MATMULS),
        hf=_OWN,
    )
    """The embodiment-specific projectors (a weight slot per category): ``gather`` copies each
    sample's slot and runs a batched matmul (upstream); ``grouped`` sorts the samples by slot and
    runs one grouped GEMM (a plain matmul per used slot, no copy of the weights), the same result
    and the same dense gradients for every slot."""
    bias_in_activation: bool = knob(
        False, group="model", search=Search("bool", remedy=True), hf=_OWN
    )
    """The vision tower's MLP adds its fc1 bias in the GELU's kernel instead of the GEMM's (whose
    compiled form otherwise starts from a copy of the bias broadcast over its output). The same
    sums, rounded once less."""
    gelu_epilogue: bool = knob(False, group="model", search=Search("bool", remedy=True), hf=_OWN)
    """The frozen vision tower's fc1 runs its bias and GELU in the GEMM's epilogue (cuBLASLt) on
    CUDA, where nothing needs fc1's gradient. The GELU of the fp32 sum, rounded to bf16 once
    instead of twice."""
    fused_frozen_qkv: bool = knob(False, group="model", search=Search("bool"), hf=_OWN)
    """The frozen attention layers (vision tower, frozen LLM layers) run their query, key and value
    projections as one GEMM over a copy of the three weights side by side, made once the weights
    have their final dtype. Each output element is the same dot product. The copy is not saved;
    weights loaded into a built session (``--init-from``) refresh it. Layers converted to fp8 keep
    their own GEMMs."""
    attended_kv_only: bool = knob(False, group="model", search=Search("bool", remedy=True), hf=_OWN)
    """The DiT's cross-attention layers project keys and values only for the tokens they attend to
    (its text layers the text tokens, its image layers the image tokens; upstream projects every
    VL token for both and masks). Masked keys get no attention weight, so the loss and the
    gradients are the same sums over fewer zero terms (to float rounding)."""

    def __post_init__(self) -> None:
        validate(self)
