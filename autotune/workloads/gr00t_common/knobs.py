"""The model knobs every GR00T replica declares: how its vision tower's MLP, its action head and
its LM head compute, never what (each exact or to float rounding).

Declared once here, as the fields of :class:`Gr00tHeadKnobs`; a configuration's ``model`` mapping
reads them beside ``freeze`` and ``unfreeze`` (:mod:`autotune.config.workload_knobs`). Applied by
:meth:`autotune.workloads.gr00t_common.workload.Gr00tWorkload.apply_model_options`, which hands
each knob by name to the model's ``configure``. A replica with more knobs subclasses this one.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.config.knob import NotCarried, Search, knob, validate

CATEGORY_MATMULS = ("gather", "grouped")

OWN = NotCarried(
    "it changes how autotune's GR00T layers compute; the Trainer runs the model as it was built "
    "(build it with autotune.prepare to keep it)"
)


@dataclass
class Gr00tHeadKnobs:
    """The ``model`` knobs of every GR00T replica (see the module docstring)."""

    skip_dead_work: bool = knob(False, group="model", search=Search("bool", remedy=True), hf=OWN)
    """Skip work whose output never reaches the loss: the LM-head logits, which upstream computes
    and discards, and the action decoder on the state token. The loss reads no position's logits
    (N1.6 computes them at every position, N1.7 at the last one, upstream's ``logits_to_keep=1``),
    so the LM head is dropped whole. Exact: no loss or gradient changes."""
    frozen_prefix_no_grad: bool = knob(
        False, group="model", search=Search("bool", remedy=True), hf=OWN
    )
    """Run the frozen prefix (the backbone: vision, connector, frozen LLM layers) with gradients
    off, so that autograd records nothing for it and checkpointed prefix blocks are not wrapped.
    With every prefix weight frozen nothing there needs a gradient: exact, bit for bit. Refused
    where ``model.unfreeze`` trains a prefix region."""
    category_matmul: str = knob(
        "gather",
        group="model",
        choices=CATEGORY_MATMULS,
        search=Search("categorical", choices=CATEGORY_MATMULS),
        hf=OWN,
    )
    """The embodiment-specific projectors (a weight slot per category): ``gather`` copies each
    sample's slot and runs a batched matmul (upstream); ``grouped`` sorts the samples by slot and
    runs one grouped GEMM (a plain matmul per used slot, no copy of the weights), the same result
    and the same dense gradients for every slot."""
    attended_kv_only: bool = knob(False, group="model", search=Search("bool", remedy=True), hf=OWN)
    """The DiT's cross-attention layers project keys and values only for the tokens they attend to
    (its text layers the text tokens, its image layers the image tokens; upstream projects every
    VL token for both and masks). Masked keys get no attention weight, so the loss and the
    gradients are the same sums over fewer zero terms (to float rounding)."""

    gelu_epilogue: bool = knob(False, group="model", search=Search("bool", remedy=True), hf=OWN)
    """The frozen vision tower's MLP runs fc1's bias and GELU in the GEMM's epilogue (cuBLASLt) on
    CUDA, where nothing needs fc1's gradient (both replicas' towers use the tanh GELU, which is the
    epilogue's). The GELU of the fp32 sum, rounded to bf16 once instead of twice, and no pass of
    its own over fc1's output."""

    def __post_init__(self) -> None:
        validate(self)
