"""The optimizer's knobs: how AdamW's update runs (``impl``, ``streams``, ``overlap``) and its
hyper-parameters, which are the workload's (``Workload.stock_config``) and which tuning never
changes. Applied by :mod:`autotune.train.optim`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.config._strict import check
from autotune.config.knob import Carried, Needs, NotCarried, Search, knob, validate

OPTIMIZER_IMPLS = ("foreach", "fused", "loop", "compiled", "master", "adamw8bit", "adamw4bit")
LOW_BIT = {"adamw8bit": 8, "adamw4bit": 4}
"""The implementations that keep AdamW's two moments quantized (torchao.optim), by bits a value."""
_LOW_BIT_BLOCK = {"adamw8bit": 256, "adamw4bit": 128}
"""Values per fp32 scale of torchao's block-wise quantization (its AdamW8bit and AdamW4bit defaults)."""
_TRAINER_OPTIM = {
    "fused": "adamw_torch_fused",
    "adamw8bit": "adamw_torch_8bit",  # torchao's AdamW8bit, as transformers' OptimizerNames says
    "adamw4bit": "adamw_torch_4bit",
}


def _impl_to_trainer(impl: str, cfg: Any, cuda: bool) -> tuple[dict[str, Any], str | None]:
    args = {"optim": _TRAINER_OPTIM.get(impl, "adamw_torch")}
    if impl == "loop":
        return (
            args,
            "the Trainer's torch AdamW picks its for-each kernels; it has no per-parameter loop",
        )
    if impl in ("compiled", "master"):
        extra = " (no bf16 weights with fp32 masters)" if impl == "master" else ""
        return (
            args,
            f"{impl!r} is autotune's own AdamW; the Trainer steps torch's over fp32 weights{extra}",
        )
    return args, None


def _offload_to_trainer(offload: bool, cfg: Any, cuda: bool) -> tuple[dict[str, Any], str | None]:
    if not offload:
        return {}, None
    return {}, (
        "the Trainer keeps AdamW's state on the device; wrap its optimizer in torchao's "
        "CPUOffloadOptimizer yourself (optimizer_cls_and_kwargs)"
    )


def _schedule_to_trainer(schedule: str, cfg: Any, cuda: bool) -> tuple[dict[str, Any], str | None]:
    # autotune's constant schedule warms up first, as the Trainer's constant_with_warmup does
    return {"lr_scheduler_type": "cosine" if schedule == "cosine" else "constant_with_warmup"}, None


def _warmup_to_trainer(ratio: float, cfg: Any, cuda: bool) -> tuple[dict[str, Any], str | None]:
    # as steps, which every transformers version reads the same way (newer ones dropped warmup_ratio)
    return {"warmup_steps": round(ratio * cfg.optimizer.total_steps)}, None


def _betas_to_trainer(
    betas: list[float], cfg: Any, cuda: bool
) -> tuple[dict[str, Any], str | None]:
    return {"adam_beta1": betas[0], "adam_beta2": betas[1]}, None


@dataclass
class OptimizerConfig:
    """AdamW and its learning-rate schedule. Applied by ``autotune.train.optim``."""

    impl: str = knob(
        "foreach",
        group="optimizer",
        choices=OPTIMIZER_IMPLS,
        needs=(
            Needs(
                "one_process",
                "'master' trains on one process: several would all-reduce the bf16 weights' "
                "gradients in bf16",
                unless=("foreach", "fused", "loop", "compiled", *LOW_BIT),
            ),
        ),
        # quantized moments are not the same update: a trial holding one leads only where loss
        # parity with stock passes, and the report says so
        numerics=tuple(LOW_BIT),
        # autotune's own implementations are a choice of a workload's space file (they assume
        # bf16-autocast linear weights); every model runs torch's three
        search=Search("categorical", choices=("foreach", "fused", "loop"), remedy="fused"),
        hf=_impl_to_trainer,
    )
    """``foreach`` (torch's default), ``fused`` (one kernel per group), ``loop`` (per parameter),
    ``compiled`` (the same AdamW update written as for-each ops and compiled by ``torch.compile``:
    one pass over parameters, gradients and moments with the clip coefficient folded in, after one
    pass that computes the gradient norm; see :mod:`autotune.train.optim.compiled`) or ``master``
    (trainable weights that the forward reads only through bf16 autocast stored in bf16, their fp32
    masters in the optimizer, the update one pass over every tensor; one process only; see
    :mod:`autotune.train.optim.master`), ``adamw8bit`` or ``adamw4bit`` (torchao's AdamW with both
    moments quantized block-wise to 8 or 4 bits, updated per parameter by a compiled function:
    about 2 or 1 byte of state a parameter instead of 8; not the same numbers, so loss parity
    decides; see :mod:`autotune.train.optim.lowbit`)."""
    exp_avg_dtype: str = knob(
        "fp32",
        group="optimizer",
        choices=("fp32", "bf16"),
        # a first moment rounded to bf16 every step is not the same update: loss parity decides
        numerics=("bf16",),
        search=Search("categorical", choices=("fp32", "bf16"), when={"optimizer.impl": ["master"]}),
        hf=NotCarried("the first moment in bf16 is autotune's master AdamW's", same_as="fp32"),
    )
    """With ``impl: master``: the dtype AdamW's first moment (``exp_avg``) of the weights stored in
    bf16 with fp32 masters is kept in (other tensors keep theirs in fp32). ``bf16`` rounds it to
    nearest as each update writes it (the update itself runs in fp32), which saves 2 of the
    update's 28 bytes read and written per such weight each step, and 2 bytes of state;
    not the same numbers, so loss parity decides. The second moment stays fp32: its step is a
    thousandth of its size (beta2 0.999), under bf16's resolution, so it would stop moving."""
    lr: float = knob(1e-4, group=None, low=0, low_open=True, hf=Carried("learning_rate"))
    """Peak learning rate."""
    betas: list[float] = knob(
        group=None,
        factory=lambda: [0.9, 0.999],
        allowed="two numbers in [0, 1)",
        hf=_betas_to_trainer,
    )
    """Adam's beta1 and beta2."""
    eps: float = knob(1e-8, group=None, low=0, low_open=True, hf=Carried("adam_epsilon"))
    """Adam's epsilon."""
    weight_decay: float = knob(1e-5, group=None, low=0, hf=Carried("weight_decay"))
    """Decoupled weight decay (not applied to biases and norms)."""
    warmup_ratio: float = knob(
        0.05, group=None, low=0, high=1, allowed="a number in [0, 1)", hf=_warmup_to_trainer
    )
    """Fraction of ``total_steps`` of linear warm-up before the decay."""
    schedule: str = knob(
        "cosine", group=None, choices=("cosine", "constant"), hf=_schedule_to_trainer
    )
    """``cosine`` (decay to zero over ``total_steps``) or ``constant`` (the peak rate after warm-up)."""
    total_steps: int = knob(10000, group=None, low=1, integer=True, hf=Carried("max_steps"))
    """Length of the schedule (the Trainer decays over ``max_steps``)."""
    grad_clip: float = knob(1.0, group=None, low=0, hf=Carried("max_grad_norm"))
    """Clip the global gradient norm to this value (0 disables clipping)."""
    streams: int = knob(
        1,
        group="optimizer",
        low=1,
        high=8,
        integer=True,
        search=Search(
            "categorical",
            choices=(1, 2, 4),
            when={"optimizer.impl": ["foreach", "fused", "loop"]},
            remedy=2,
            needs="cuda",
        ),
        hf=NotCarried("the Trainer steps its AdamW on one stream"),
    )
    """Shards of the parameters stepped concurrently on CUDA side streams (gradient norm and update):
    one multi-tensor launch does not fill a large GPU. The same parameters bit for bit; 1: one
    stream. Not with ``impl: compiled`` or ``master`` (see :mod:`autotune.train.optim.streams`)."""
    overlap: bool = knob(
        False,
        group="optimizer",
        needs=(
            Needs(
                "one_process",
                "the update beside the next step's prefix is for one process",
                (False,),
            ),
        ),
        search=Search(
            "bool",
            # the prefix is split from one forward: no micro-batches
            when={
                "graphs.mode": ["step"],
                "memory.accumulation_steps": [1],
                "optimizer.impl": ["master"],
            },
            needs="cuda",
        ),
        hf=NotCarried(
            "the update beside the next step's frozen prefix runs in autotune's captured step"
        ),
    )
    """Run each step's AdamW update beside the next step's frozen prefix (the workload's
    ``split_loss``: for gr00t_n16 the vision tower, connector and frozen LLM layers, which read none
    of the weights it writes) instead of after the step's backward. The same updates in the same
    order: step k's update (with step k's learning rate and clipping) is done before step k+1's
    first trained layer. With ``impl: master`` and ``graphs.mode: step``, on one process."""
    overlap_sm_carveout: int = knob(
        0,
        group="optimizer",
        low=0,
        high=96,
        integer=True,
        search=Search("categorical", choices=(0, 16, 32, 48), when={"optimizer.overlap": [True]}),
        hf=NotCarried("the update beside the prefix runs in autotune's captured step", same_as=0),
    )
    """With ``overlap``: streaming multiprocessors the prefix's cuBLAS GEMMs leave to the update that
    runs beside them (``torch._C._set_sm_carveout_experimental`` while the prefix is captured). A GEMM
    tile holds most of an SM's shared memory, so without a carve-out the update's blocks find an SM
    only between GEMM waves; with one, the prefix's GEMMs run on fewer SMs and the memory-bound
    update streams on the rest. The same results to the GEMMs' rounding (another kernel choice)."""
    offload: bool = knob(
        False,
        group="memory",
        needs=(
            Needs("cuda", "the optimizer state moves to host memory from a CUDA device", (False,)),
            Needs(
                "one_process",
                "the host update reads each gradient as its backward leaves it, before DDP has "
                "all-reduced it",
                (False,),
            ),
        ),
        search=Search(
            "bool", when={"optimizer.impl": ["fused"], "graphs.mode": ["none", "regions"]}
        ),
        hf=_offload_to_trainer,
    )
    """AdamW's moments and the fp32 update in host memory (torchao's ``CPUOffloadOptimizer``
    around torch's fused AdamW on the CPU): each gradient is copied to the host as its backward
    finishes, the host steps each parameter as its gradient arrives and copies it back, the copies
    on a side stream beside the backward and the host's work. The same AdamW update; 0 bytes of
    state a parameter on the device (tensors under 4096 values stay there), at the cost of
    moving every gradient and parameter over the host link each step. With ``impl: fused``, on one
    process, not in a captured step (see :mod:`autotune.train.optim.offload`)."""

    def __post_init__(self) -> None:
        validate(self)
        check(
            len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
            "betas",
            self.betas,
            "two numbers in [0, 1)",
        )
        check(self.warmup_ratio < 1, "warmup_ratio", self.warmup_ratio, "a number in [0, 1)")
        check(
            not self.overlap or self.impl == "master",
            "overlap",
            self.overlap,
            "false unless impl is 'master'",
            "is not supported",
        )
        check(
            not self.offload or self.impl == "fused",
            "offload",
            self.offload,
            "false unless impl is 'fused' (the host steps torch's fused AdamW)",
            "is not supported",
        )
        check(
            self.exp_avg_dtype == "fp32" or self.impl == "master",
            "exp_avg_dtype",
            self.exp_avg_dtype,
            "'fp32' unless impl is 'master'",
            "is not supported",
        )
        check(
            self.streams == 1 or self.impl not in ("compiled", "master", *LOW_BIT),
            "streams",
            self.streams,
            f"1 with impl {self.impl!r}",
            "is not supported",
        )

    def state_bytes_per_param(self, param_bytes: int = 4) -> float:
        """Device bytes the optimizer holds per trainable parameter (moments, master copy; 0 for
        what ``offload`` keeps on the host), for trainable weights of ``param_bytes`` bytes each.

        torch's AdamW (``foreach``, ``fused``, ``loop``) and ``compiled`` keep two moments in the
        parameter's dtype; ``master`` two fp32 moments and an fp32 master (its weights are bf16 on
        the device; the first moment in bf16 with ``exp_avg_dtype``); the low-bit ones two moments
        of 1 or 1/2 byte and an fp32 scale per block.
        Parameters under 4096 values (biases, norms) keep full moments in every case; they are a
        rounding error of a large model and not counted.
        """
        if self.offload:
            return 0.0
        if self.impl in LOW_BIT:
            return 2 * (LOW_BIT[self.impl] / 8 + 4 / _LOW_BIT_BLOCK[self.impl])
        if self.impl == "master":
            return 4.0 + (2.0 if self.exp_avg_dtype == "bf16" else 4.0) + 4.0
        return 2.0 * param_bytes
