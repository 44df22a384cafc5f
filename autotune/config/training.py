"""The training configuration: every knob the tuner searches, as one tree of dataclasses.

Loaded from and dumped to YAML by :mod:`autotune.config.io`. Each dataclass belongs to the
component that applies it (see the ``Applied by`` line of each docstring). Field invariants are
checked in ``__post_init__`` and reported with the dotted key; checks that need the machine or
the workload (CUDA graphs on CPU, unknown region names) live in
:func:`autotune.config.compat.check_compatible`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.config._strict import OMIT_NONE, check, check_choice

SCHEMA_VERSION = 1

PRECISIONS = ("fp32", "bf16", "fp16", "fp8")
DTYPES = ("fp32", "bf16", "fp16")
OPTIMIZER_IMPLS = ("foreach", "fused", "loop", "compiled", "master")
CATEGORY_MATMULS = ("gather", "grouped")


@dataclass
class DDPConfig:
    """DistributedDataParallel knobs. Applied by ``autotune.train.distributed``."""

    bucket_cap_mb: float = 100.0
    """Gradient bucket size in MiB: smaller buckets start all-reduce earlier, larger ones amortise it."""
    gradient_as_bucket_view: bool = False
    """Let ``.grad`` tensors alias the communication buckets (saves one copy and memory)."""
    static_graph: bool = False
    """Declare the autograd graph static: DDP can skip unused-parameter search and reorder buckets."""
    comm_hook: str = "none"
    """Gradient compression hook: ``none``, ``bf16`` or ``fp16`` (DDP's default_hooks)."""
    broadcast_buffers: bool = False
    """Broadcast module buffers from rank 0 each step (the replica has none that change)."""
    graph_overlap: bool = False
    """With ``graphs.mode: step`` on several ranks: all-reduce each bucket inside the captured
    backward as soon as its gradients are accumulated (communication overlapped with the rest of
    the backward), instead of every bucket after the backward, between two graph replays."""

    def __post_init__(self) -> None:
        check(self.bucket_cap_mb > 0, "bucket_cap_mb", self.bucket_cap_mb, "a number > 0")
        check(self.bucket_cap_mb <= 4096, "bucket_cap_mb", self.bucket_cap_mb, "at most 4096")
        check_choice("comm_hook", self.comm_hook, ("none", "bf16", "fp16"))


@dataclass
class PrecisionConfig:
    """Mixed precision. Applied by ``autotune.train.precision``.

    ``regions`` maps a region of the workload's region map to the precision its forward runs in:
    ``fp32`` (no autocast; its parameters kept in fp32), ``bf16`` / ``fp16`` (autocast; fp16 adds
    a gradient scaler) or ``fp8`` (torchao float8 training of its linear layers; GPUs of compute
    capability >= 8.9). Regions not named run in ``default``.
    """

    default: str = "bf16"
    """Precision of every region that ``regions`` does not name."""
    regions: dict[str, str] = field(default_factory=dict)
    """Per-region precision overrides, e.g. ``{dit: fp32}``."""
    tf32: bool = True
    """Allow TF32 matmuls and convolutions for fp32 work."""
    frozen_dtype: str = "bf16"
    """Storage dtype of frozen weights in autocast regions (upstream stores them in bf16)."""
    trainable_dtype: str = "fp32"
    """Storage dtype of trainable weights (fp32 master weights upstream)."""

    def __post_init__(self) -> None:
        check_choice("default", self.default, PRECISIONS)
        for region, prec in self.regions.items():
            check_choice(f"regions.{region}", prec, PRECISIONS)
        check_choice("frozen_dtype", self.frozen_dtype, DTYPES)
        check_choice("trainable_dtype", self.trainable_dtype, ("fp32", "bf16"))

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

    mode: str = "none"
    """``none``, ``regions`` or ``step``."""
    regions: list[str] = field(default_factory=list)
    """Regions captured when ``mode`` is ``regions``."""
    warmup_steps: int = 3
    """Eager steps (on a side stream) before capture; DDP needs at least 11 without static_graph."""

    def __post_init__(self) -> None:
        check_choice("mode", self.mode, ("none", "regions", "step"))
        check(self.warmup_steps >= 1, "warmup_steps", self.warmup_steps, "an integer >= 1")
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


@dataclass
class CompileConfig:
    """``torch.compile`` per region. Applied by ``autotune.train.compile``."""

    regions: list[str] = field(default_factory=list)
    """Regions compiled; ``[all]`` compiles the whole model as one module."""
    mode: str = "default"
    """``default``, ``reduce-overhead``, ``max-autotune`` or ``max-autotune-no-cudagraphs``."""
    fullgraph: bool = False
    """Fail instead of falling back to eager at a graph break."""
    dynamic: bool = False
    """Compile for dynamic shapes (the replica's shapes are static)."""

    def __post_init__(self) -> None:
        check_choice(
            "mode",
            self.mode,
            ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
        )

    @property
    def enabled(self) -> bool:
        return bool(self.regions)


@dataclass
class CheckpointConfig:
    """Activation checkpointing per region (recompute in backward). Applied by ``autotune.train.knobs``."""

    regions: list[str] = field(default_factory=list)
    """Regions whose blocks are checkpointed (only trainable regions have a backward)."""


@dataclass
class OptimizerConfig:
    """AdamW and its learning-rate schedule. Applied by ``autotune.train.optim.adamw``.

    Only ``impl`` is a knob (how the update runs); the hyper-parameters are the workload's
    (``Workload.stock_config``; for gr00t_n16 the upstream fine-tuning ones) and tuning never
    changes them.
    """

    impl: str = "foreach"
    """``foreach`` (torch's default), ``fused`` (one kernel per group), ``loop`` (per parameter) or
    ``compiled`` (the same AdamW update written as for-each ops and compiled by ``torch.compile``:
    one pass over parameters, gradients and moments with the clip coefficient folded in, after one
    pass that computes the gradient norm; see :mod:`autotune.train.optim.compiled`) or ``master``
    (trainable weights that the forward reads only through bf16 autocast stored in bf16, their fp32
    masters in the optimizer, the update one pass over every tensor; one process only; see
    :mod:`autotune.train.optim.master`)."""
    lr: float = 1e-4
    """Peak learning rate."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """Adam's beta1 and beta2."""
    eps: float = 1e-8
    """Adam's epsilon."""
    weight_decay: float = 1e-5
    """Decoupled weight decay (not applied to biases and norms)."""
    warmup_ratio: float = 0.05
    """Fraction of ``total_steps`` of linear warm-up before the decay."""
    schedule: str = "cosine"
    """``cosine`` (decay to zero over ``total_steps``) or ``constant`` (the peak rate after warm-up)."""
    total_steps: int = 10000
    """Length of the cosine schedule."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value (0 disables clipping)."""
    streams: int = 1
    """Shards of the parameters stepped concurrently on CUDA side streams (gradient norm and update):
    one multi-tensor launch does not fill a large GPU. The same parameters bit for bit; 1: one
    stream. Not with ``impl: compiled`` (see :mod:`autotune.train.optim.streams`)."""

    overlap: bool = False
    """Run each step's AdamW update beside the next step's frozen prefix (the workload's
    ``split_loss``: for gr00t_n16 the vision tower, connector and frozen LLM layers, which read none
    of the weights it writes) instead of after the step's backward. The same updates in the same
    order: step k's update (with step k's learning rate and clipping) is done before step k+1's
    first trained layer. With ``impl: master`` and ``graphs.mode: step``, on one process."""

    def __post_init__(self) -> None:
        check_choice("impl", self.impl, OPTIMIZER_IMPLS)
        check(
            not self.overlap or self.impl == "master",
            "overlap",
            self.overlap,
            "false unless impl is 'master'",
            "is not supported",
        )
        check(self.lr > 0, "lr", self.lr, "a number > 0")
        check(
            len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
            "betas",
            self.betas,
            "two numbers in [0, 1)",
        )
        check(self.eps > 0, "eps", self.eps, "a number > 0")
        check(self.weight_decay >= 0, "weight_decay", self.weight_decay, "a number >= 0")
        check(0 <= self.warmup_ratio < 1, "warmup_ratio", self.warmup_ratio, "a number in [0, 1)")
        check_choice("schedule", self.schedule, ("cosine", "constant"))
        check(self.total_steps >= 1, "total_steps", self.total_steps, "an integer >= 1")
        check(self.grad_clip >= 0, "grad_clip", self.grad_clip, "a number >= 0")
        check(1 <= self.streams <= 8, "streams", self.streams, "an integer in [1, 8]")
        check(
            self.streams == 1 or self.impl not in ("compiled", "master"),
            "streams",
            self.streams,
            f"1 with impl {self.impl!r}",
            "is not supported",
        )


@dataclass
class DataConfig:
    """The data path and its loader knobs. Applied by ``autotune.data``.

    ``source`` and the fields below it name the workload's own data; which of them a workload
    reads is its ``data_fields`` (``autotune.config.compat.check_data`` refuses the others, so a
    workload's ``best.yaml`` carries only what applies to it). The loader knobs from
    ``num_workers`` on apply to every workload whose data autotune loads.
    """

    source: str | None = None
    """The workload's data source (``autotune inspect --list`` shows each workload's): e.g.
    ``lerobot`` for gr00t_n16, or ``synthetic`` (random tensors, no I/O); null: the workload's first."""
    dataset: str | None = field(default=None, metadata=OMIT_NONE)
    """Dataset folder; null makes (once) and uses a dataset in the cache folder."""
    episodes: int | None = field(default=None, metadata=OMIT_NONE)
    """LeRobot sources: episodes of the dataset made when ``dataset`` is null (null: 8)."""
    video_backend: str | None = field(default=None, metadata=OMIT_NONE)
    """LeRobot sources: mp4 decoder in the workers, ``pyav``, ``opencv`` or ``torchcodec`` (null: pyav)."""
    num_workers: int = 2
    """DataLoader worker processes (0 loads in the main process)."""
    prefetch_factor: int | None = None
    """Batches each worker loads ahead (``null``: torch's default, 2 with workers)."""
    pin_memory: bool = True
    """Page-lock host batches so host-to-device copies can be asynchronous."""
    persistent_workers: bool = True
    """Keep workers alive between epochs."""
    multiprocessing_context: str = "fork"
    """Worker start method: ``fork``, ``spawn`` or ``forkserver``."""
    device_prefetch: int = 0
    """Depth of the device prefetcher: batches copied host-to-device ahead on a side stream (0: off)."""

    def __post_init__(self) -> None:
        if self.episodes is not None:
            check(self.episodes >= 1, "episodes", self.episodes, "null or an integer >= 1")
        if self.video_backend is not None:
            check_choice("video_backend", self.video_backend, ("pyav", "opencv", "torchcodec"))
        check(
            0 <= self.num_workers <= 256, "num_workers", self.num_workers, "an integer in [0, 256]"
        )
        if self.prefetch_factor is not None:
            check(
                self.prefetch_factor >= 1,
                "prefetch_factor",
                self.prefetch_factor,
                "null or an integer >= 1",
            )
            check(
                self.num_workers > 0,
                "prefetch_factor",
                self.prefetch_factor,
                "null when num_workers is 0",
                "is set",
            )
        check_choice(
            "multiprocessing_context", self.multiprocessing_context, ("fork", "spawn", "forkserver")
        )
        check(
            0 <= self.device_prefetch <= 16,
            "device_prefetch",
            self.device_prefetch,
            "an integer in [0, 16]",
        )


@dataclass
class KernelConfig:
    """Kernel-level choices. Applied by ``autotune.train.knobs``."""

    attention: str = "auto"
    """SDPA backend: ``auto`` (torch chooses), ``flash``, ``efficient``, ``cudnn`` or ``math``."""
    cuda_device_max_connections: int | None = None
    """``CUDA_DEVICE_MAX_CONNECTIONS`` for the training processes (null: the driver's default)."""
    cublaslt_workspace_kib: int | None = None
    """``CUBLASLT_WORKSPACE_SIZE`` (KiB) for the training processes (null: torch's default). Not a knob of
    the shipped spaces: on an H200 with torch 2.11 a 1-KiB workspace left every GEMM kernel of ``full``'s
    step as it was (BENCHMARKS.md, "Past 240 samples/s", session 11)."""

    def __post_init__(self) -> None:
        check_choice("attention", self.attention, ("auto", "flash", "efficient", "cudnn", "math"))
        if self.cuda_device_max_connections is not None:
            check(
                1 <= self.cuda_device_max_connections <= 32,
                "cuda_device_max_connections",
                self.cuda_device_max_connections,
                "null or an integer in [1, 32]",
            )
        if self.cublaslt_workspace_kib is not None:
            check(
                1 <= self.cublaslt_workspace_kib <= 1 << 20,
                "cublaslt_workspace_kib",
                self.cublaslt_workspace_kib,
                "null or an integer in [1, 1048576]",
            )

    def environment(self) -> dict[str, str]:
        """The environment variables these choices set in a training process, read when CUDA starts
        (before any kernel runs, so they cannot be changed inside a process)."""
        env = {}
        if self.cuda_device_max_connections is not None:
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = str(self.cuda_device_max_connections)
        if self.cublaslt_workspace_kib is not None:
            env["CUBLASLT_WORKSPACE_SIZE"] = str(self.cublaslt_workspace_kib)
        return env


@dataclass
class ModelConfig:
    """Which regions train. Applied by ``autotune.train.window.runner`` (upstream: tune_visual, tune_llm, ...)."""

    freeze: list[str] = field(default_factory=list)
    """Regions frozen in addition to the workload's frozen parts."""
    unfreeze: list[str] = field(default_factory=list)
    """Frozen regions made trainable (e.g. ``vision`` to tune the vision tower)."""
    skip_dead_work: bool = False
    """Skip work whose output never reaches the loss (gr00t_n16: the LM-head logits, which upstream
    computes and discards, and the action decoder on the state token). Exact: no loss or gradient
    changes. Applied by the workload (``Workload.apply_model_options``)."""
    category_matmul: str = "gather"
    """Layers with a weight slot per category (gr00t_n16's embodiment-specific projectors):
    ``gather`` copies each sample's slot and runs a batched matmul (upstream); ``grouped`` sorts the
    samples by slot and runs one grouped GEMM (a plain matmul per used slot, no copy of the weights),
    the same result and the same dense gradients for every slot. Applied by the workload."""
    bias_in_activation: bool = False
    """Linear layers that feed an activation add their bias in the activation's kernel instead of
    the GEMM's (gr00t_n16: the vision tower's MLP, whose compiled GEMM otherwise starts from a copy
    of the bias broadcast over its output). The same sums, rounded once less. Applied by the workload."""
    gelu_epilogue: bool = False
    """Linear layers followed by a GELU run the bias and the GELU in the GEMM's epilogue (cuBLASLt) on
    CUDA where nothing needs their gradient (gr00t_n16: the frozen vision tower's MLP). The GELU of the
    fp32 sum, rounded to bf16 once instead of twice. Applied by the workload."""
    fused_frozen_qkv: bool = False
    """Frozen attention layers run their query, key and value projections as one GEMM over a copy of the
    three weights side by side, made once the weights have their final dtype (gr00t_n16: the vision
    tower and the frozen LLM layers). Each output element is the same dot product. Applied by the
    workload; the copy is not saved, and weights loaded into a built session (``--init-from``) refresh it.
    Layers converted to fp8 keep their own GEMMs."""
    attended_kv_only: bool = False
    """Cross-attention layers that mask most of their keys project keys and values only for the tokens
    they attend to (gr00t_n16: the DiT's text layers attend to the text tokens, its image layers to the
    image tokens, and upstream projects every VL token for both). Masked keys get no attention weight,
    so the loss and the gradients are the same sums over fewer zero terms (to float rounding).
    Applied by the workload."""

    def __post_init__(self) -> None:
        check_choice("category_matmul", self.category_matmul, CATEGORY_MATMULS)


@dataclass
class TrainConfig:
    """One training configuration: what ``autotune train --config`` runs and ``run`` emits."""

    schema_version: int = SCHEMA_VERSION
    """Version of this schema; files of another version are refused."""
    workload: str = "gr00t_n16"
    """Workload name (``autotune inspect --list`` shows them), ``path/to/file.py:Class`` or ``package.module:Class``."""
    preset: str = "full"
    """Model size preset of the workload (``full``, ``medium``, ``tiny`` for gr00t_n16)."""
    batch_size: int = 16
    """Samples per GPU (per process) per step."""
    seed: int = 0
    """Seed of the model initialisation, the data order and the training randomness."""
    device: str = "auto"
    """``auto`` (CUDA when present), ``cuda`` or ``cpu``."""
    model: ModelConfig = field(default_factory=ModelConfig)
    ddp: DDPConfig = field(default_factory=DDPConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    graphs: GraphConfig = field(default_factory=GraphConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    checkpointing: CheckpointConfig = field(default_factory=CheckpointConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    kernels: KernelConfig = field(default_factory=KernelConfig)
    provenance: dict[str, Any] | None = None
    """Where this configuration came from (written by ``autotune run``: measured samples/s,
    speed-up, loss parity, environment). Informational: training ignores it."""

    def __post_init__(self) -> None:
        check(
            self.schema_version == SCHEMA_VERSION,
            "schema_version",
            self.schema_version,
            str(SCHEMA_VERSION),
            "is not supported",
        )
        check(self.batch_size >= 1, "batch_size", self.batch_size, "an integer >= 1")
        check_choice("device", self.device, ("auto", "cuda", "cpu"))
