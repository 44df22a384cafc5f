"""Checks of a configuration against the workload and the machine it will run on.

Each rule is a row of a table: a predicate that names an impossible combination and the reason.
``check_compatible`` raises :class:`IncompatibleConfigError` for the first row that matches, so a
configuration that cannot work is refused when it is loaded, before any process starts.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from autotune.config.knob import Needs, walk
from autotune.config.training import TrainConfig
from autotune.errors import ConfigError, IncompatibleConfigError, short_repr


@dataclass(frozen=True)
class Machine:
    """What the configuration will run on."""

    cuda: bool
    capability: tuple[int, int] | None = None
    world_size: int = 1
    cpus: int | None = (
        None  # host cores this process may run on (its affinity), shared by the ranks
    )
    device_bytes: int | None = None
    """Memory of one device (CUDA): a memory budget below it is emulated by a cap, and lifting the
    cap runs what the budget refused."""
    name: str = ""
    """What measures: the GPU's name with CUDA, else the CPU's model (a study's speeds compare only
    within one kind of machine)."""

    @classmethod
    def current(cls, world_size: int = 1) -> Machine:
        import torch  # not at the top: reading or checking a config file must not pay torch's import

        cpus = usable_cpus()
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            capability = (props.major, props.minor)
            return cls(True, capability, world_size, cpus, props.total_memory, props.name)
        return cls(False, None, world_size, cpus, name=cpu_model())


COMPILE_OFF = ("TORCH_COMPILE_DISABLE", "TORCHDYNAMO_DISABLE")
"""The variables with which torch runs every ``torch.compile`` as plain eager code (at "1")."""


def compile_turned_off(env: Mapping[str, str] | None = None) -> str | None:
    """The variable that turns ``torch.compile`` off in ``env`` (this process's), if one does: the
    compile knobs then measure as eager, and a job run without it compiles what was measured eager."""
    env = os.environ if env is None else env
    return next((name for name in COMPILE_OFF if env.get(name) == "1"), None)


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what the platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity: ``taskset`` or a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


CPU_RANKS_PER_CORE = 4
"""gloo ranks a CPU run may give each core: more ranks than cores run, slowly (a distributed path
tried on a small machine), but a typo of 10**9 would start every one."""


def check_nproc(nproc: int, cuda: bool) -> None:
    """Refuse more processes than the machine has GPUs (``cuda``), or than its cores take on a CPU
    run, before one starts: torchrun starts every one asked for, and each rank past the last GPU
    fails."""
    if cuda:
        import torch

        most = torch.cuda.device_count()
        have = f"{most} GPUs"
    else:
        cores = usable_cpus()
        most = CPU_RANKS_PER_CORE * cores
        have = f"{cores} CPU cores (at most {CPU_RANKS_PER_CORE} processes a core)"
    if nproc > most:
        raise ConfigError(
            f"--nproc: {nproc} processes is more than this machine's {have} take; allowed: 1 to {most}"
        )


def _has_torchao() -> bool:
    try:
        import torchao.float8  # noqa: F401
    except ImportError:
        return False
    return True


Rule = tuple[str, Callable[[TrainConfig, Machine], bool], str]


def _lacks(what: str, cfg: TrainConfig, machine: Machine) -> bool:
    if what == "cuda":
        return not _on_cuda(cfg, machine)
    if what == "one_process":
        return machine.world_size > 1
    return not _fp8_ready(cfg, machine)


def _fp8_ready(cfg: TrainConfig, machine: Machine) -> bool:
    capable = (machine.capability or (0, 0)) >= (8, 9)
    return _on_cuda(cfg, machine) and capable and _has_torchao()


def declared_rules(cfg: TrainConfig) -> list[Rule]:
    """The machine rules of single knobs, from their declarations (``Needs``), the workload's
    model knobs included."""
    declared = list(walk(TrainConfig))
    if cfg.model.options is not None:
        declared += list(walk(type(cfg.model.options), "model"))
    rules: list[Rule] = []
    for d in declared:
        for need in d.spec.needs:
            rules.append((d.key, _needs_rule(d.key, need), need.reason))
    return rules


def _needs_rule(key: str, need: Needs) -> Callable[[TrainConfig, Machine], bool]:
    def predicate(cfg: TrainConfig, machine: Machine) -> bool:
        return need.applies(get_value(cfg, key)) and _lacks(need.what, cfg, machine)

    return predicate


def get_value(cfg: object, key: str) -> object:
    """The value at dotted ``key`` of a configuration."""
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


RULES: tuple[Rule, ...] = (
    (
        "device",
        lambda c, m: c.device == "cuda" and not m.cuda,
        "device 'cuda' was asked for but no CUDA device is present",
    ),
    (
        "precision",
        lambda c, m: c.precision.uses("fp8") and not _on_cuda(c, m),
        "fp8 training needs a CUDA device",
    ),
    (
        "precision",
        lambda c, m: (
            c.precision.uses("fp8") and _on_cuda(c, m) and (m.capability or (0, 0)) < (8, 9)
        ),
        "fp8 training needs a GPU of compute capability >= 8.9 (Ada, Hopper or newer)",
    ),
    (
        "precision",
        lambda c, m: c.precision.uses("fp8") and not _has_torchao(),
        "fp8 training needs torchao (pip install torchao)",
    ),
    (
        "precision",
        lambda c, m: c.precision.uses("fp16") and c.graphs.mode == "step",
        "an fp16 gradient scaler checks for inf/NaN on the host, which a captured whole step cannot do; use bf16 or graphs.mode 'regions'",
    ),
    (
        "compile.mode",
        lambda c, m: (
            c.compile.enabled
            and c.graphs.enabled
            and c.compile.mode in ("reduce-overhead", "max-autotune")
        ),
        "compile modes that capture CUDA graphs themselves cannot be combined with graphs.mode; use 'default' or 'max-autotune-no-cudagraphs'",
    ),
    (
        "compile.regions",
        lambda c, m: "all" in c.compile.regions and c.graphs.mode == "regions",
        "compiling the whole model cannot be combined with per-region graph capture",
    ),
    (
        "ddp.comm_hook",
        lambda c, m: c.ddp.comm_hook == "bf16" and m.world_size > 1 and not _on_cuda(c, m),
        "the bf16 compression hook needs NCCL (CUDA); gloo supports 'fp16' or 'none'",
    ),
    (
        "optimizer.impl",
        lambda c, m: c.optimizer.impl == "master" and c.precision.trainable_dtype != "fp32",
        "'master' keeps fp32 masters of fp32 trainable weights; it needs precision.trainable_dtype 'fp32'",
    ),
    (
        "optimizer.overlap_sm_carveout",
        lambda c, m: c.optimizer.overlap_sm_carveout > 0 and not c.optimizer.overlap,
        "the SMs are carved out of the prefix's GEMMs for the update beside them; it needs "
        "optimizer.overlap: true",
    ),
    (
        "optimizer.offload",
        lambda c, m: c.optimizer.offload and c.graphs.mode == "step",
        "the host steps AdamW between the device's copies, which a captured step cannot hold; "
        "it needs graphs.mode 'none' or 'regions'",
    ),
    (
        "optimizer.overlap",
        lambda c, m: c.optimizer.overlap and c.graphs.mode != "step",
        "the update runs beside the next step's prefix inside the captured step; it needs graphs.mode 'step'",
    ),
    (
        "memory.accumulation_steps",
        lambda c, m: (
            c.memory.accumulation_steps > 1
            and c.graphs.mode == "step"
            and (m.world_size > 1 or c.optimizer.overlap)
        ),
        "a captured whole step accumulates micro-batches on one rank without optimizer.overlap only "
        "(several ranks all-reduce from the backward's hooks; the overlap splits one forward); "
        "with either it needs graphs.mode 'none' or 'regions'",
    ),
)
"""The rules that combine several knobs, or the machine's device with a knob's meaning; the rules
of single knobs are declared with the knob (:func:`declared_rules`)."""


def _on_cuda(cfg: TrainConfig, machine: Machine) -> bool:
    return machine.cuda and cfg.device in ("auto", "cuda")


def check_compatible(
    cfg: TrainConfig, machine: Machine, regions: tuple[str, ...] | list[str]
) -> None:
    """Refuse a configuration that cannot work on ``machine`` with the workload's ``regions``."""
    known = set(regions)
    named = {
        "precision.regions": list(cfg.precision.regions),
        "graphs.regions": cfg.graphs.regions,
        "compile.regions": [r for r in cfg.compile.regions if r != "all"],
        "checkpointing.regions": cfg.checkpointing.regions,
        "model.freeze": cfg.model.freeze,
        "model.unfreeze": cfg.model.unfreeze,
    }
    for key, names in named.items():
        for name in names:
            if name not in known:
                raise IncompatibleConfigError(
                    f"{key}: {short_repr(name)} is not a region of workload {cfg.workload!r}; "
                    f"allowed: {sorted(known)}"
                )
    check_machine(cfg, machine)


def check_machine(cfg: TrainConfig, machine: Machine) -> None:
    """The rules that need only the machine: checked before a workload named ``module:Class`` is
    imported, so that a configuration that cannot run here never runs that module's code."""
    for key, predicate, reason in (*RULES[:1], *declared_rules(cfg), *RULES[1:]):
        if predicate(cfg, machine):
            raise IncompatibleConfigError(f"{key}: refused: {reason}")


DATA_FIELDS = ("dataset", "episodes", "video_backend")
"""Fields of ``data`` that name a workload's own data (the loader knobs apply to every workload)."""


def check_data(cfg: TrainConfig, sources: tuple[str, ...], fields: tuple[str, ...]) -> None:
    """Refuse a data source the workload does not have, or a data field it does not read (set, not null)."""
    if cfg.data.source is not None and cfg.data.source not in sources:
        raise IncompatibleConfigError(
            f"data.source: {short_repr(cfg.data.source)} is not a data source of workload "
            f"{cfg.workload!r}; allowed: {list(sources)}"
        )
    for name in DATA_FIELDS:
        if name not in fields and getattr(cfg.data, name) is not None:
            raise IncompatibleConfigError(
                f"data.{name}: workload {cfg.workload!r} does not read it; remove it "
                f"(its data fields: {list(fields)})"
            )


def resolved(path: Path, error: type[Exception] = ConfigError) -> Path:
    """``path`` made absolute, links followed; ``error`` for a link that leads back to itself."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):  # a symbolic link loop (RuntimeError before Python 3.13)
        raise error(
            f"{str(path)!r} is a symbolic link that leads back to itself; allowed: a folder's path"
        ) from None


def use_dataset(cfg: TrainConfig, dataset: str | None, synthetic: bool = False) -> None:
    """Apply ``--dataset DIR`` (resolved, so that the configuration works from any folder) and
    ``--synthetic`` to ``cfg``; a dataset replaces a synthetic source the configuration had."""
    if dataset is None:
        if synthetic:
            cfg.data.source = "synthetic"
        return
    if synthetic:
        raise ConfigError("--dataset and --synthetic: give one (synthetic batches read no dataset)")
    try:
        path = resolved(Path(dataset).expanduser())
    except ConfigError as exc:
        raise ConfigError(f"--dataset: {exc}") from None
    if not path.is_dir():
        raise ConfigError(
            f"--dataset {dataset}: not a folder; give a LeRobot dataset folder "
            "(`python -m autotune data check DIR` checks one)"
        )
    cfg.data.dataset = str(path)
    if cfg.data.source == "synthetic":
        cfg.data.source = None
