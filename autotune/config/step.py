"""The knobs of how a step runs on the device: DDP, precision, CUDA graphs, ``torch.compile``,
activation checkpointing and kernel choices. Each dataclass is applied by the module its docstring
names; each field is the knob's one declaration (:mod:`autotune.config.knob`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.config._strict import check
from autotune.config.knob import Carried, Needs, NotCarried, Search, knob, validate

PRECISIONS = ("fp32", "bf16", "fp16", "fp8")
FP8_SCALINGS = ("tensorwise", "rowwise")
DTYPES = ("fp32", "bf16", "fp16")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
ATTENTION = ("auto", "flash", "efficient", "cudnn", "math")
_EAGER = {"graphs.mode": ["none", "regions"]}


@dataclass
class DDPConfig:
    """DistributedDataParallel knobs. Applied by ``autotune.train.distributed``."""

    bucket_cap_mb: float = knob(
        100.0,
        group="ddp",
        low=0,
        low_open=True,
        high=4096,
        allowed="a number > 0, at most 4096",
        search=Search("float", low=1, high=400, log=True),
        hf=Carried("ddp_bucket_cap_mb", to=lambda v, c: max(1, round(v))),
    )
    """Gradient bucket size in MiB: smaller buckets start all-reduce earlier, larger ones amortise it."""
    gradient_as_bucket_view: bool = knob(
        False,
        group="ddp",
        search=Search("bool", when=_EAGER, remedy=True),
        hf=NotCarried("the Trainer has no field for DDP's gradient_as_bucket_view"),
    )
    """Let ``.grad`` tensors alias the communication buckets (saves one copy and memory)."""
    static_graph: bool = knob(
        False,
        group="ddp",
        search=Search("bool", when=_EAGER, remedy=True),
        hf=Carried("ddp_static_graph", to=lambda v, c: True if v else None),
    )
    """Declare the autograd graph static: DDP can skip unused-parameter search and reorder buckets."""
    comm_hook: str = knob(
        "none",
        group="ddp",
        choices=("none", "bf16", "fp16"),
        search=Search(
            "categorical", choices=("none", "bf16", "fp16"), choice_needs={"bf16": "cuda"}
        ),
        hf=NotCarried("register DDP's bf16_compress_hook or fp16_compress_hook yourself"),
    )
    """Gradient compression hook: ``none``, ``bf16`` or ``fp16`` (DDP's default_hooks)."""
    broadcast_buffers: bool = knob(False, group="ddp", hf=Carried("ddp_broadcast_buffers"))
    """Broadcast module buffers from rank 0 each step (the replica has none that change)."""
    graph_overlap: bool = knob(
        False,
        group="ddp",
        search=Search("bool", when={"graphs.mode": ["step"]}, remedy=True, needs="cuda"),
        hf=NotCarried(
            "the in-graph reducer (all-reduce inside the captured step) is autotune's own"
        ),
    )
    """With ``graphs.mode: step`` on several ranks: all-reduce each bucket inside the captured
    backward as soon as its gradients are accumulated (communication overlapped with the rest of
    the backward), instead of every bucket after the backward, between two graph replays."""

    def __post_init__(self) -> None:
        validate(self)


def _default_precision_to_trainer(
    p: str, cfg: Any, cuda: bool
) -> tuple[dict[str, Any], str | None]:
    if p == "fp8":
        return {}, "the Trainer has no fp8 training of its own (see accelerate's fp8 recipes)"
    if p == "fp16" and not cuda:
        return {}, "fp16 mixed precision needs CUDA, which this machine has not"
    return ({p: True} if p in ("bf16", "fp16") else {}), None


@dataclass
class PrecisionConfig:
    """Mixed precision. Applied by ``autotune.train.precision``.

    ``regions`` maps a region of the workload's region map to the precision its forward runs in:
    ``fp32`` (no autocast; its parameters kept in fp32), ``bf16`` / ``fp16`` (autocast; fp16 adds
    a gradient scaler) or ``fp8`` (torchao float8 training of its linear layers; GPUs of compute
    capability >= 8.9). Regions not named run in ``default``.
    """

    default: str = knob(
        "bf16",
        group="precision",
        choices=PRECISIONS,
        numerics=("fp8",),
        hf=_default_precision_to_trainer,
    )
    """Precision of every region that ``regions`` does not name."""
    regions: dict[str, str] = knob(
        group="precision",
        factory=dict,
        choices=PRECISIONS,
        allowed=str(list(PRECISIONS)),
        numerics=("fp8",),
        hf=NotCarried("the Trainer runs the whole model in one precision, not one per region"),
    )
    """Per-region precision overrides, e.g. ``{dit: fp32}`` (a search space names one region a knob:
    ``precision.regions.dit``)."""
    tf32: bool = knob(
        True,
        group="precision",
        search=Search("bool", remedy=True, needs="cuda"),
        hf=Carried("tf32", needs_cuda=True),
    )
    """Allow TF32 matmuls and convolutions for fp32 work."""
    frozen_dtype: str = knob(
        "bf16",
        group="precision",
        choices=DTYPES,
        search=Search("categorical", choices=("bf16", "fp32")),
        hf=NotCarried(
            "the Trainer keeps frozen weights in the model's dtype; load them in this dtype yourself",
            same_as="fp32",
        ),
    )
    """Storage dtype of frozen weights in autocast regions (upstream stores them in bf16)."""
    trainable_dtype: str = knob(
        "fp32",
        group="precision",
        choices=("fp32", "bf16"),
        search=Search("categorical", choices=("fp32", "bf16")),
        hf=NotCarried("load the model in bf16 (torch_dtype) instead: the Trainer keeps its dtype"),
    )
    """Storage dtype of trainable weights (fp32 master weights upstream)."""
    fp8_frozen_scaling: str = knob(
        "tensorwise",
        group="precision",
        choices=FP8_SCALINGS,
        numerics=("rowwise",),
        search=Search("categorical", choices=FP8_SCALINGS, needs="fp8"),
        hf=NotCarried("the Trainer has no fp8 training of its own (see accelerate's fp8 recipes)"),
    )
    """How the frozen layers of ``fp8`` regions scale their GEMMs: ``tensorwise`` (one scale per
    activation tensor and per weight, torchao's recipe) or ``rowwise`` (a scale per activation row
    and per output channel of the weight: each row's amax and cast in one pass, where tensorwise
    reduces over the whole activation first; ``autotune.train.fp8_static``). Trained fp8 layers keep
    torchao's tensorwise recipe."""

    def __post_init__(self) -> None:
        spec = type(self).__dataclass_fields__["regions"].metadata["knob"]
        for region, prec in self.regions.items():
            spec.check(f"regions.{region}", prec)
        for name, field_ in type(self).__dataclass_fields__.items():
            if name != "regions":  # checked per region above
                field_.metadata["knob"].check(name, getattr(self, name))

    def of(self, region: str) -> str:
        return self.regions.get(region, self.default)

    def uses(self, precision: str) -> bool:
        return self.default == precision or precision in self.regions.values()


@dataclass
class GraphConfig:
    """CUDA-graph capture. Applied by ``autotune.train.graphs``.

    ``mode: none`` runs eagerly; ``regions`` captures the forward and backward of each named
    region with ``torch.cuda.make_graphed_callables``; ``step`` captures the whole step (forward,
    backward, optimizer) with ``torch.cuda.graph`` and replays it with new inputs copied into
    static buffers. Random numbers (noise, flow-matching times, dropout) are drawn inside the
    graph from the graph-safe Philox generator, so they differ on every replay.
    """

    mode: str = knob(
        "none",
        group="graphs",
        choices=("none", "regions", "step"),
        needs=(Needs("cuda", "CUDA graphs need a CUDA device", ("none",)),),
        search=Search("categorical", choices=("none", "regions", "step"), remedy="step"),
        hf=NotCarried("the Trainer does not capture CUDA graphs"),
    )
    """``none``, ``regions`` or ``step``."""
    regions: list[str] = knob(
        group="graphs",
        factory=list,
        allowed="region names",
        hf=NotCarried("the Trainer does not capture CUDA graphs"),
    )
    """Regions captured when ``mode`` is ``regions`` (a search space offers the workload's regions)."""
    warmup_steps: int = knob(
        3,
        group="graphs",
        low=1,
        high=1000,  # a measuring run warms up through all of them before it measures
        integer=True,
        hf=NotCarried("the Trainer does not capture CUDA graphs"),
    )
    """Eager steps (on a side stream) before capture; DDP needs at least 11 without static_graph."""

    def __post_init__(self) -> None:
        validate(self)
        if self.mode == "regions":
            check(
                bool(self.regions),
                "regions",
                self.regions,
                "a non-empty list when mode is 'regions'",
                "is empty",
            )
        if self.mode != "regions":
            check(
                not self.regions,
                "regions",
                self.regions,
                "an empty list unless mode is 'regions'",
                "is set",
            )

    @property
    def enabled(self) -> bool:
        return self.mode != "none"


def _compile_regions_to_trainer(
    regions: list[str], cfg: Any, cuda: bool
) -> tuple[dict, str | None]:
    if regions == ["all"]:
        return {"torch_compile": True}, None
    if regions:
        return {}, f"the Trainer compiles the whole model only, not the regions {regions}"
    return {}, None


def _compile_mode_to_trainer(mode: str, cfg: Any, cuda: bool) -> tuple[dict, str | None]:
    if cfg.compile.regions == ["all"] and mode != "default":
        return {"torch_compile_mode": mode}, None
    return {}, None


@dataclass
class CompileConfig:
    """``torch.compile`` per region. Applied by ``autotune.train.knobs``."""

    regions: list[str] = knob(
        group="compile",
        factory=list,
        allowed="region names or [all]",
        hf=_compile_regions_to_trainer,
    )
    """Regions compiled; ``[all]`` compiles the whole model as one module (a search space offers the
    workload's regions)."""
    mode: str = knob(
        "default",
        group="compile",
        choices=COMPILE_MODES,
        search=Search("categorical", choices=("default", "max-autotune-no-cudagraphs")),
        hf=_compile_mode_to_trainer,
    )
    """``default``, ``reduce-overhead``, ``max-autotune`` or ``max-autotune-no-cudagraphs``."""
    fullgraph: bool = knob(
        False, group="compile", hf=NotCarried("the Trainer compiles with torch.compile's defaults")
    )
    """Fail instead of falling back to eager at a graph break."""
    dynamic: bool = knob(
        False, group="compile", hf=NotCarried("the Trainer compiles with torch.compile's defaults")
    )
    """Compile for dynamic shapes (the replica's shapes are static)."""

    def __post_init__(self) -> None:
        validate(self)

    @property
    def enabled(self) -> bool:
        return bool(self.regions)


def _checkpointing_to_trainer(regions: list[str], cfg: Any, cuda: bool) -> tuple[dict, str | None]:
    if not regions:
        return {}, None
    return {"gradient_checkpointing": True}, (
        f"the Trainer checkpoints every layer of a transformers model, not the regions {regions} only "
        "(exported as gradient_checkpointing: true)"
    )


@dataclass
class CheckpointConfig:
    """Activation checkpointing per region (recompute in backward). Applied by ``autotune.train.knobs``."""

    regions: list[str] = knob(
        group="memory", factory=list, allowed="trainable region names", hf=_checkpointing_to_trainer
    )
    """Regions whose blocks are checkpointed (only trainable regions have a backward)."""
    every: int = knob(
        1,
        group="memory",
        low=1,
        integer=True,
        hf=NotCarried("the Trainer checkpoints every layer or none", same_as=1),
    )
    """Checkpoint one block in ``every`` of each named region (1: all of them; 2: the first, third,
    ...): the blocks between keep their activations, so memory falls by about that share of the
    regions' activations and the recomputation is that share of their forward. A search space offers
    it where some region is checkpointed (it changes nothing otherwise)."""

    def __post_init__(self) -> None:
        validate(self)
        check(
            self.every == 1 or bool(self.regions),
            "every",
            self.every,
            "1 unless checkpointing.regions names a region",
            "has no region to apply to",
        )


def _env(name: str) -> NotCarried:
    return NotCarried(f"set {name} in the environment instead")


@dataclass
class KernelConfig:
    """Kernel-level choices. Applied by ``autotune.train.knobs`` (``attention``) and, as
    environment variables of the training processes, by the launchers (:meth:`environment`)."""

    attention: str = knob(
        "auto",
        group="kernels",
        choices=ATTENTION,
        needs=(
            Needs(
                "cuda",
                "this attention backend needs a CUDA device; use 'auto' or 'math' on CPU",
                ("auto", "math"),
            ),
        ),
        search=Search("categorical", choices=ATTENTION),
        hf=NotCarried("choose the attention kernel with the model's attn_implementation instead"),
    )
    """SDPA backend: ``auto`` (torch chooses), ``flash``, ``efficient``, ``cudnn`` or ``math``."""
    cuda_device_max_connections: int | None = knob(
        None,
        group="kernels",
        low=1,
        high=32,
        integer=True,
        nullable=True,
        needs=(Needs("cuda", "CUDA_DEVICE_MAX_CONNECTIONS applies to CUDA devices only", (None,)),),
        search=Search("categorical", choices=(None, 1, 8, 32)),
        hf=_env("CUDA_DEVICE_MAX_CONNECTIONS"),
    )
    """``CUDA_DEVICE_MAX_CONNECTIONS`` for the training processes (null: the driver's default)."""
    cublaslt_workspace_kib: int | None = knob(
        None,
        group="kernels",
        low=1,
        high=1 << 20,
        integer=True,
        nullable=True,
        needs=(Needs("cuda", "CUBLASLT_WORKSPACE_SIZE applies to CUDA devices only", (None,)),),
        hf=_env("CUBLASLT_WORKSPACE_SIZE"),
    )
    """``CUBLASLT_WORKSPACE_SIZE`` (KiB) for the training processes (null: torch's default). In no
    shipped space: on an H200 with torch 2.11 a 1-KiB workspace left every GEMM kernel of ``full``'s
    step as it was (BENCHMARKS.md)."""

    def __post_init__(self) -> None:
        validate(self)

    def environment(self) -> dict[str, str]:
        """The environment variables these choices set in a training process, read when CUDA starts
        (before any kernel runs, so they cannot be changed inside a process)."""
        env = {}
        if self.cuda_device_max_connections is not None:
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = str(self.cuda_device_max_connections)
        if self.cublaslt_workspace_kib is not None:
            env["CUBLASLT_WORKSPACE_SIZE"] = str(self.cublaslt_workspace_kib)
        return env
