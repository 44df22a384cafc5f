"""A knob's one declaration: the dataclass field that holds it.

Every knob of the configuration tree is a field made by :func:`knob`. Its metadata carries all that
is said of the knob anywhere else, so the rest derives from it:

* what values it may take (``choices`` or a numeric range), checked when a configuration is built
  (:func:`validate`, from each config dataclass's ``__post_init__``);
* its knob group (:data:`GROUPS`), which the profile guide maps to the bottleneck it relieves;
* what it needs of the machine (:class:`Needs`: CUDA, fp8 kernels, one process), which the
  machine rules of :mod:`autotune.config.compat` and the search spaces derive from;
* its default search range and remedy (:class:`Search`), from which the auto space is made and
  which a search-space file may narrow;
* which of its values change what is computed, not only how fast (``numerics``: fp8 layers,
  quantized optimizer states): loss parity with stock decides a trial that holds one, and the
  report names them (:func:`numerics_of`);
* how it maps to Hugging Face's ``TrainingArguments`` (:class:`Carried` or :class:`NotCarried`),
  from which ``autotune trainer-args`` is made.

Adding a knob means one ``knob(...)`` field, the code that applies it and its test.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from autotune.config._strict import check

GROUPS = (
    "data",
    "graphs",
    "compile",
    "precision",
    "optimizer",
    "ddp",
    "model",
    "memory",
    "kernels",
)
"""Knob groups: each names the part of a step its knobs change (the profile guide's unit)."""

NEEDS = ("cuda", "fp8", "one_process")
"""What a knob value may need of the machine: a CUDA device, fp8 training (compute capability
>= 8.9 and torchao), or a single training process."""

_UNSET = object()


@dataclass(frozen=True)
class Needs:
    """A requirement of the knob's values: ``what`` (one of :data:`NEEDS`) for every value but
    ``unless`` (the value or values that need nothing), and the reason a refusal gives."""

    what: str
    reason: str
    unless: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        assert self.what in NEEDS, self.what

    def applies(self, value: Any) -> bool:
        return value not in self.unless


@dataclass(frozen=True)
class Search:
    """The knob's default place in a search space (what ``autotune space`` prints for it).

    ``type`` is a search-space knob type; ``choices`` (categorical) or ``low``/``high``/``log``
    (numbers; ``high="cores"``: the host cores of each rank, up to 16); ``when`` conditions it on
    other knobs; ``remedy`` is the value that relieves the group's bottleneck as a rule (tried
    first when the profile points at the group); ``choice_needs`` maps a choice to what it needs.
    """

    type: str
    choices: tuple[Any, ...] = ()
    low: float | None = None
    high: float | str | None = None
    log: bool = False
    when: dict[str, Any] = field(default_factory=dict)
    when_several_ranks: dict[str, Any] = field(default_factory=dict)
    """Conditions added to ``when`` where several ranks train (what one rank can run beside a knob
    and several cannot)."""
    remedy: Any = None
    remedy_several_ranks: Any = None
    choice_needs: dict[Any, str] = field(default_factory=dict)
    needs: str | None = None
    """What the knob needs to be searched at all, beyond what its values need (:class:`Needs`):
    a knob that changes nothing without CUDA (TF32, pinned memory) is not searched there."""
    doc: str = ""


@dataclass(frozen=True)
class Carried:
    """The knob is a ``TrainingArguments`` field: ``to(value, cfg)`` gives the field's value (None
    leaves the field out); ``needs_cuda``: the Trainer refuses the field without CUDA."""

    field: str
    to: Callable[[Any, Any], Any] | None = None
    needs_cuda: bool = False

    def value(self, value: Any, cfg: Any) -> Any:
        return self.to(value, cfg) if self.to else value


@dataclass(frozen=True)
class NotCarried:
    """The Trainer cannot apply the knob: ``reason`` says why and what to do instead. A value equal
    to ``same_as`` (default: the knob's default) is what the Trainer does anyway, so nothing is lost."""

    reason: str
    same_as: Any = _UNSET


HFMap = Carried | NotCarried | Callable[[Any, Any, bool], tuple[dict[str, Any], str | None]]
"""How a knob reaches ``TrainingArguments``. A callable ``(value, cfg, cuda) -> (fields, lost)``
maps a knob whose fields depend on its value or on other knobs: ``fields`` are carried, and
``lost`` (or None) says what of the value the Trainer cannot apply."""


@dataclass(frozen=True)
class KnobSpec:
    """Everything declared of one knob (see the module docstring)."""

    group: str | None
    """The knob group; None: a setting of the run (batch, seed, data), never searched."""
    hf: HFMap
    choices: tuple[Any, ...] = ()
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    integer: bool = False
    nullable: bool = False
    allowed: str = ""
    """What is allowed, as an error says it (derived from choices and range when empty)."""
    needs: tuple[Needs, ...] = ()
    search: Search | None = None
    numerics: tuple[Any, ...] = ()
    """Values that change what is computed (within the parity tolerance at best), not only its speed;
    for a mapping knob (``precision.regions``), values of the mapping."""

    def changes_numerics(self, value: Any) -> bool:
        values = value.values() if isinstance(value, dict) else (value,)
        return any(v in self.numerics for v in values if isinstance(v, (str, int, float, bool)))

    def __post_init__(self) -> None:
        assert self.group is None or self.group in GROUPS, self.group

    def allowed_text(self) -> str:
        if self.allowed:
            return self.allowed
        if self.choices:
            text = str(list(self.choices))
        else:
            kind = "an integer" if self.integer else "a number"
            if self.low is not None and self.high is not None:
                left = "(" if self.low_open else "["
                text = f"{kind} in {left}{_num(self.low)}, {_num(self.high)}]"
            elif self.low is not None:
                text = f"{kind} {'>' if self.low_open else '>='} {_num(self.low)}"
            else:
                text = f"{kind}"
        return f"null or {text}" if self.nullable and not self.choices else text

    def check(self, name: str, value: Any) -> None:
        """Raise a FieldError for ``name`` unless ``value`` is allowed."""
        if value is None and self.nullable:
            return
        if self.choices:
            ok = value in self.choices
            check(ok, name, value, self.allowed_text(), "is not one of the choices")
            return
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            check(math.isfinite(value), name, value, self.allowed_text(), "is not a finite number")
            above = self.low is None or (value > self.low if self.low_open else value >= self.low)
            below = self.high is None or value <= self.high
            check(above and below, name, value, self.allowed_text())


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def knob(
    default: Any = _UNSET,
    *,
    group: str | None,
    hf: HFMap,
    factory: Callable[[], Any] | None = None,
    omit_none: bool = False,
    **spec: Any,
) -> Any:
    """A dataclass field declaring a knob (see :class:`KnobSpec` for ``spec``); ``omit_none``: the
    YAML form leaves the field out while it is None."""
    meta: dict[str, Any] = {"knob": KnobSpec(group=group, hf=hf, **spec)}
    if omit_none:
        meta["omit_none"] = True
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def spec_of(f: dataclasses.Field) -> KnobSpec | None:
    return f.metadata.get("knob")


def validate(obj: Any) -> None:
    """Check every knob field of the dataclass ``obj`` against its declaration."""
    for f in dataclasses.fields(obj):
        spec = spec_of(f)
        if spec is not None:
            spec.check(f.name, getattr(obj, f.name))


@dataclass(frozen=True)
class Declared:
    """One declared knob of a configuration tree: its dotted key, its spec, its default and the
    field's type (``int``, ``int | None``, ``list[str]``...)."""

    key: str
    spec: KnobSpec
    default: Any
    hint: Any = Any


def walk(cls: type, prefix: str = "") -> Iterator[Declared]:
    """Every knob declared in the dataclass tree ``cls``, dotted keys from ``prefix``."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        spec = spec_of(f)
        if spec is not None:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            yield Declared(key, spec, default, hints[f.name])
        elif dataclasses.is_dataclass(hints[f.name]):
            yield from walk(hints[f.name], key)


def not_carried_value(spec: KnobSpec, default: Any) -> Any:
    """The value at which a :class:`NotCarried` knob loses nothing."""
    assert isinstance(spec.hf, NotCarried)
    return default if spec.hf.same_as is _UNSET else spec.hf.same_as


def numerics_of(cls: type, obj: Any) -> dict[str, Any]:
    """The knobs of ``obj`` (a ``cls`` tree) that hold a value changing what is computed
    (:attr:`KnobSpec.numerics`), by dotted key."""
    out = {}
    for d in walk(cls):
        value = obj
        for part in d.key.split("."):
            value = getattr(value, part)
        if d.spec.changes_numerics(value):
            out[d.key] = value
    return out
