"""The training configuration: every knob the tuner searches, as one tree of dataclasses.

Loaded from and dumped to YAML by :mod:`autotune.config.io`. Each dataclass belongs to the
component that applies it (see the ``Applied by`` line of each docstring), and each knob is one
field declared with :func:`autotune.config.knob.knob`: its allowed values, group, machine needs,
search range and Hugging Face mapping in one place. Checks that need the machine or the workload
(CUDA graphs on CPU, unknown region names) live in :func:`autotune.config.compat.check_compatible`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.config._strict import FieldError, check, from_dict
from autotune.config.data import DataConfig
from autotune.config.knob import Carried, NotCarried, knob, validate
from autotune.config.memory import MemoryConfig, micro_batch_size
from autotune.config.optimizer import OPTIMIZER_IMPLS, OptimizerConfig
from autotune.config.step import (
    DTYPES,
    PRECISIONS,
    CheckpointConfig,
    CompileConfig,
    DDPConfig,
    GraphConfig,
    KernelConfig,
    PrecisionConfig,
)
from autotune.config.workload_knobs import (
    knobs_declaring,
    model_knobs_of,
    registered,
)
from autotune.errors import ConfigError, short_repr

SCHEMA_VERSION = 1

__all__ = [
    "DTYPES",
    "OPTIMIZER_IMPLS",
    "PRECISIONS",
    "SCHEMA_VERSION",
    "CheckpointConfig",
    "CompileConfig",
    "DDPConfig",
    "DataConfig",
    "GraphConfig",
    "KernelConfig",
    "MemoryConfig",
    "ModelConfig",
    "OptimizerConfig",
    "PrecisionConfig",
    "TrainConfig",
]

_FREEZE = NotCarried(
    "set requires_grad on the model's parameters yourself before the Trainer is made", same_as=[]
)


@dataclass
class ModelConfig:
    """Which regions train, and the workload's own model knobs. Applied by ``autotune.train.session``
    (freezing) and by the workload (``Workload.apply_model_options``).

    ``options`` holds the knobs the workload declares (:mod:`autotune.config.workload_knobs`); in
    YAML they sit beside ``freeze`` and ``unfreeze`` and read as attributes of this object
    (``cfg.model.skip_dead_work``).
    """

    freeze: list[str] = knob(group=None, factory=list, allowed="region names", hf=_FREEZE)
    """Regions frozen in addition to the workload's frozen parts."""
    unfreeze: list[str] = knob(group=None, factory=list, allowed="region names", hf=_FREEZE)
    """Frozen regions made trainable (e.g. ``vision`` to tune the vision tower)."""
    options: Any = field(default=None, metadata={"flatten": True})
    """The workload's model knobs (a dataclass instance), or None when it declares none."""

    def __getattr__(self, name: str) -> Any:
        options = self.__dict__.get("options")
        if name.startswith("_") or options is None or not hasattr(options, name):
            raise AttributeError(name)
        return getattr(options, name)

    def __setattr__(self, name: str, value: Any) -> None:
        options = self.__dict__.get("options")
        if name not in _MODEL_FIELDS and options is not None and hasattr(options, name):
            setattr(options, name, value)
        else:
            object.__setattr__(self, name, value)

    def bind(self, workload: str) -> None:
        """Give ``options`` the type of ``workload``'s knobs (their defaults where none are set); a
        ``module:Class`` workload keeps what was read until :meth:`bind_class`."""
        if ":" in workload and model_knobs_of(workload) is None:
            return
        self.bind_class(model_knobs_of(workload), workload)

    def bind_class(self, cls: type | None, workload: str) -> None:
        """Give ``options`` the type ``cls`` (a workload's ``model_knobs``), keeping the values set."""
        if type(self.options) is cls or (self.options is None and cls is None):
            return
        if cls is None:
            if self.options != type(self.options)():
                raise FieldError(
                    "model", _set_keys(self.options), f"knobs of {workload!r}", "are not"
                )
            self.options = None
            return
        values = {} if self.options is None else _set_values(self.options)
        unknown = [k for k in values if k not in {f.name for f in dataclasses.fields(cls)}]
        if unknown:
            raise FieldError("model", unknown, f"knobs of {workload!r}", "are not")
        self.options = cls(**values)

    @classmethod
    def parse(cls, data: Any, key: str, parent: dict[str, Any]) -> ModelConfig:
        """The ``model`` mapping of a configuration whose ``workload`` is ``parent['workload']``."""
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"{key}: {short_repr(data)} has the wrong type; allowed: a mapping")
        workload = parent.get("workload", TrainConfig.workload)
        knobs = model_knobs_of(workload) if isinstance(workload, str) else None
        own = {k: v for k, v in data.items() if k in _GENERIC}
        rest = {k: v for k, v in data.items() if k not in _GENERIC}
        if knobs is None and isinstance(workload, str) and ":" in workload and rest:
            knobs = knobs_declaring(list(rest))
        allowed = sorted(_GENERIC + tuple(f.name for f in dataclasses.fields(knobs or _None)))
        for name in rest:
            if knobs is None and isinstance(workload, str) and ":" not in workload:
                known = registered()  # a misspelt workload would read as one without model knobs
                if workload not in known:
                    raise ConfigError(
                        f"{key}.{name}: unknown key, as workload {short_repr(workload)} is unknown "
                        f"(known workloads: {known}); allowed: {allowed}"
                    )
            if knobs is None or name not in {f.name for f in dataclasses.fields(knobs)}:
                raise ConfigError(f"{key}.{name}: unknown key; allowed: {allowed}")
        model = from_dict(_Generic, own, key)
        both = [r for r in model.unfreeze if r in model.freeze]
        if both:  # unfreeze is applied last: the freeze would be dropped without a word
            raise ConfigError(
                f"{key}.unfreeze: {both!r} is also in {key}.freeze; allowed: each region in one of "
                "freeze and unfreeze"
            )
        options = from_dict(knobs, rest, key) if knobs is not None else None
        return cls(freeze=model.freeze, unfreeze=model.unfreeze, options=options)


def _set_values(options: Any) -> dict[str, Any]:
    """The knobs of ``options`` that differ from their defaults."""
    default = type(options)()
    return {
        f.name: getattr(options, f.name)
        for f in dataclasses.fields(options)
        if getattr(options, f.name) != getattr(default, f.name)
    }


def _set_keys(options: Any) -> list[str]:
    return list(_set_values(options))


_GENERIC = ("freeze", "unfreeze")
_MODEL_FIELDS = (*_GENERIC, "options")


@dataclass
class _Generic:
    freeze: list[str] = field(default_factory=list)
    unfreeze: list[str] = field(default_factory=list)


@dataclass
class _None:
    pass


def _device_to_trainer(device: str, cfg: Any, cuda: bool) -> tuple[dict[str, Any], str | None]:
    if device == "cuda" and not cuda:
        return {
            "use_cpu": True
        }, "device 'cuda' on a machine without CUDA: the Trainer runs on the CPU"
    return ({"use_cpu": True} if device == "cpu" or not cuda else {}), None


def _batch_to_trainer(batch: int, cfg: Any, cuda: bool) -> tuple[dict[str, Any], str | None]:
    """The Trainer's batch is per micro-batch: ``gradient_accumulation_steps`` of them an update."""
    return {"per_device_train_batch_size": batch // cfg.memory.accumulation_steps}, None


@dataclass
class TrainConfig:
    """One training configuration: what ``autotune train --config`` runs and ``run`` emits.

    ``schema_version``, ``workload``, ``preset`` and ``provenance`` say what is trained and where
    the configuration came from; every other leaf is a declared knob (:data:`NOT_KNOBS`).
    """

    schema_version: int = SCHEMA_VERSION
    """Version of this schema; files of another version are refused."""
    workload: str = "gr00t_n16"
    """Workload name (``autotune inspect --list`` shows them), ``path/to/file.py:Class`` or ``package.module:Class``."""
    preset: str = "full"
    """Model size preset of the workload (``full``, ``medium``, ``tiny`` for gr00t_n16)."""
    batch_size: int = knob(16, group=None, low=1, integer=True, hf=_batch_to_trainer)
    """Samples per GPU (per process) per step (one optimizer update); with
    ``memory.accumulation_steps`` k, each update runs k micro-batches of ``batch_size / k``."""
    seed: int = knob(0, group=None, low=0, high=2**32 - 1, integer=True, hf=Carried("seed"))
    """Seed of the model initialisation, the data order and the training randomness."""
    device: str = knob("auto", group=None, choices=("auto", "cuda", "cpu"), hf=_device_to_trainer)
    """``auto`` (CUDA when present), ``cuda`` or ``cpu``."""
    model: ModelConfig = field(default_factory=ModelConfig, metadata={"parse": ModelConfig.parse})
    ddp: DDPConfig = field(default_factory=DDPConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    graphs: GraphConfig = field(default_factory=GraphConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    checkpointing: CheckpointConfig = field(default_factory=CheckpointConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    kernels: KernelConfig = field(default_factory=KernelConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    provenance: dict[str, Any] | None = None
    """Where this configuration came from (written by ``autotune run``: measured samples/s,
    speed-up, loss parity, environment). Informational: training reads only ``samples_per_s`` and
    ``world_size``, the speed the job's throughput watch expects (:func:`_check_provenance`)."""

    def __post_init__(self) -> None:
        check(
            self.schema_version == SCHEMA_VERSION,
            "schema_version",
            self.schema_version,
            str(SCHEMA_VERSION),
            "is not supported",
        )
        validate(self)
        _check_provenance(self.provenance or {})
        micro_batch_size(self.batch_size, self.memory.accumulation_steps)
        self.model.bind(self.workload)

    def environment(self, current: Mapping[str, str]) -> dict[str, str]:
        """The environment variables the knobs set in a training process started with ``current``
        (read when CUDA starts, so they cannot change inside a process)."""
        return {**self.kernels.environment(), **self.memory.environment(current)}


def _check_provenance(provenance: dict[str, Any]) -> None:
    """The provenance's fields a training job reads (``autotune.train.job.watch``): a hand-edited
    ``samples_per_s: fast`` failed the job with a traceback after its model was built. Every value
    must be one JSON holds too: each checkpoint writes the configuration into its JSON state."""
    _check_json_values(provenance, "provenance")
    speed, world = provenance.get("samples_per_s"), provenance.get("world_size")
    number = isinstance(speed, (int, float)) and not isinstance(speed, bool)
    check(
        speed is None or (number and math.isfinite(speed) and speed >= 0),
        "provenance.samples_per_s",
        speed,
        "null or a finite number >= 0",
        "has the wrong type",
    )
    check(
        world is None or (isinstance(world, int) and not isinstance(world, bool) and world >= 1),
        "provenance.world_size",
        world,
        "null or an integer >= 1",
        "has the wrong type",
    )


_JSON_SCALARS = (str, int, float, bool, type(None))


def _check_json_values(value: Any, key: str) -> None:
    """Refuse what YAML reads but JSON cannot write: a date (``2024-01-01`` unquoted), bytes
    (``!!binary``), a set, a mapping key that is not a string."""
    if isinstance(value, dict):
        for k, v in value.items():
            check(
                isinstance(k, str), f"{key}.{k}", k, "string keys", "has a key that is not a string"
            )
            _check_json_values(v, f"{key}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_json_values(v, f"{key}[{i}]")
    else:
        check(isinstance(value, _JSON_SCALARS), key, value,
              "text, a number, true/false, null, a list or a mapping (quote a date)", "has the wrong type")  # fmt: skip


NOT_KNOBS = ("schema_version", "workload", "preset", "provenance")
"""The fields of :class:`TrainConfig` that are not knobs: what is trained and where it came from."""
