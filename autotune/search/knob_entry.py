"""One knob's entry of a space file, checked strictly (:func:`parse_knob`): its keys, its dotted
TrainConfig key, its type, range or choices, ``when`` conditions and remedies. Every error names
the file and the key (:func:`autotune.search.knobs.space_error`)."""

from __future__ import annotations

import dataclasses
import types
from decimal import Decimal
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from autotune.config import TrainConfig
from autotune.config.knob import GROUPS as KNOB_GROUPS
from autotune.errors import ConfigError, short_repr
from autotune.search.declared import declared
from autotune.search.knobs import Knob, config_key, space_error

TYPES = ("int", "float", "categorical", "bool")
GROUPS = KNOB_GROUPS
REQUIREMENTS = ("cuda", "fp8")
KNOB_KEYS = (
    "type",
    "low",
    "high",
    "log",
    "step",
    "choices",
    "when",
    "requires",
    "group",
    "doc",
    "remedy",
    "remedy_several_ranks",
)
NOT_KNOBS = ("schema_version", "provenance", "workload", "preset", "options")
"""Fields of the configuration tree that say what it is, or hold the workload's knobs, not knobs."""
FITS: dict[Any, tuple[tuple[str, ...], str, str]] = {
    bool: (("bool", "categorical"), "true or false", "'bool', or 'categorical' of true/false"),
    int: (("int", "categorical"), "an integer", "'int', or 'categorical' of integers"),
    float: (
        ("float", "int", "categorical"),
        "a number",
        "'float' or 'int', or 'categorical' of numbers",
    ),
    str: (("categorical",), "a string", "'categorical' of strings"),
    list: (("categorical",), "a list", "'categorical' of lists"),
}
"""By the type of a config field: the knob types whose values it takes, what it holds and what a
refusal allows (a float knob on an integer field samples 1.3 workers, which every trial refuses)."""


def check_key(key: str) -> None:
    """Raise ConfigError unless ``key`` names a field of the TrainConfig tree (or a mapping entry)."""
    cls: Any = TrainConfig
    parts = config_key(key).split(".")
    if parts[0] == "model" and len(parts) == 2 and declared(key) is not None:
        return  # a workload's own model knob
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(cls):
            raise ConfigError(
                f"not a knob of the training configuration ({'.'.join(parts[:i])} has no fields)"
            )
        fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in NOT_KNOBS}
        if part not in fields:
            raise ConfigError(
                f"not a knob of the training configuration; allowed at this level: {sorted(fields)}"
            )
        hint = typing_hints(cls)[part]
        if getattr(hint, "__origin__", None) is dict:
            if len(parts) != i + 2:
                raise ConfigError(
                    f"name one entry of the mapping {'.'.join(parts[: i + 1])} (e.g. {'.'.join(parts[: i + 1])}.NAME)"
                )
            return
        cls = hint
    if dataclasses.is_dataclass(cls):
        raise ConfigError("names a section, not a knob")


def field_type(key: str) -> Any:
    """The type of the field a knob sets (a mapping entry's: the mapping's values); Any if undeclared."""
    d = declared(key)
    if d is None:
        return Any
    hint = d.hint
    if config_key(key) != d.key and get_origin(hint) is dict:
        hint = get_args(hint)[1]
    if get_origin(hint) in (Union, types.UnionType):
        given = [a for a in get_args(hint) if a is not type(None)]
        hint = given[0] if len(given) == 1 else Any
    return get_origin(hint) or hint


def _check_type(path: Path, where: str, key: str, kind: str) -> None:
    """Refuse a knob type whose values the field cannot hold."""
    fits = FITS.get(field_type(key))
    if fits is not None and kind not in fits[0]:
        _, holds, allowed = fits
        raise space_error(
            path,
            f"{where}.type",
            f"{short_repr(kind)} does not fit {config_key(key)}, which holds {holds}; "
            f"allowed: {allowed}",
        )


def typing_hints(cls: type) -> dict[str, Any]:
    import typing

    return typing.get_type_hints(cls)


def _number(path: Path, where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise space_error(path, where, f"{short_repr(value)} has the wrong type; allowed: a number")
    return value


def parse_knob(path: Path, key: str, spec: Any, earlier: dict[str, Knob]) -> Knob:
    where = f"knobs.{key}"
    if not isinstance(spec, dict):
        raise space_error(
            path,
            where,
            f"{short_repr(spec)} has the wrong type; allowed: a mapping with 'type' and 'group'",
        )
    unknown = [k for k in spec if k not in KNOB_KEYS]
    if unknown:
        raise space_error(path, f"{where}.{unknown[0]}", f"unknown key; allowed: {list(KNOB_KEYS)}")
    try:
        check_key(key)
    except ConfigError as exc:
        raise space_error(path, where, str(exc)) from None
    kind = spec.get("type")
    if kind not in TYPES:
        raise space_error(path, f"{where}.type", f"{short_repr(kind)} is not one of {list(TYPES)}")
    _check_type(path, where, key, kind)
    group = spec.get("group")
    if group not in GROUPS:
        raise space_error(
            path, f"{where}.group", f"{short_repr(group)} is not one of {list(GROUPS)}"
        )
    requires = spec.get("requires")
    if requires is not None and requires not in REQUIREMENTS:
        raise space_error(
            path, f"{where}.requires", f"{short_repr(requires)} is not one of {list(REQUIREMENTS)}"
        )
    kw: dict[str, Any] = {
        "key": key,
        "type": kind,
        "group": group,
        "requires": requires,
        "doc": str(spec.get("doc", "")),
    }
    if kind in ("int", "float"):
        kw.update(_parse_range(path, where, kind, spec))
    else:
        kw["choices"] = _parse_choices(path, where, kind, spec)
    kw["when"] = _parse_when(path, where, spec.get("when"), earlier)
    knob = Knob(**kw)
    return _with_remedies(path, where, spec, knob)


def _with_remedies(path: Path, where: str, spec: dict, knob: Knob) -> Knob:
    """``knob`` with the entry's ``remedy`` and ``remedy_several_ranks``, each a value it can take."""
    if "remedy" in spec:
        remedy = spec["remedy"]
        if remedy == "cores" and knob.type == "int":
            pass  # resolved per machine (for_machine)
        elif remedy is None or not knob.contains(remedy):
            raise space_error(
                path, f"{where}.remedy", f"{short_repr(remedy)} is not a value this knob can take"
            )
        knob = dataclasses.replace(knob, remedy=remedy)
    if "remedy_several_ranks" in spec:
        several = spec["remedy_several_ranks"]
        if knob.remedy is None:
            raise space_error(
                path,
                f"{where}.remedy_several_ranks",
                "needs a remedy (the one of a single rank) beside it",
            )
        if several is None or not knob.contains(several):
            raise space_error(
                path,
                f"{where}.remedy_several_ranks",
                f"{short_repr(several)} is not a value this knob can take",
            )
        knob = dataclasses.replace(knob, remedy_several_ranks=several)
    return knob


def _parse_range(path: Path, where: str, kind: str, spec: dict) -> dict[str, Any]:
    if "choices" in spec:
        raise space_error(
            path, f"{where}.choices", f"not allowed for type {kind}; use low and high"
        )
    for k in ("low", "high"):
        if k not in spec:
            raise space_error(path, f"{where}.{k}", f"missing; a {kind} knob needs low and high")
    low, high = (
        _number(path, f"{where}.low", spec["low"]),
        _number(path, f"{where}.high", spec["high"]),
    )
    if kind == "int":
        for k in ("low", "high", "step"):
            if k in spec and not isinstance(spec[k], int):
                raise space_error(
                    path,
                    f"{where}.{k}",
                    f"{short_repr(spec[k])} has the wrong type; allowed: an integer",
                )
    if not low <= high:
        raise space_error(
            path, f"{where}.low", f"low <= high must hold, but got (low={low}, high={high})"
        )
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise space_error(
            path, f"{where}.log", f"{short_repr(log)} has the wrong type; allowed: true or false"
        )
    if log and low <= 0:
        raise space_error(
            path,
            f"{where}.low",
            f"{short_repr(low)} is out of range; allowed: a number > 0 when log is true",
        )
    step = spec.get("step")
    if step is not None:
        _check_step(path, f"{where}.step", kind, (low, high), step, log)
    return {"low": low, "high": high, "log": log, "step": step}


def _check_step(
    path: Path, where: str, kind: str, bounds: tuple[float, float], step: Any, log: bool
) -> None:
    """Refuse a step Optuna would not take as given: it refuses one on a log scale (but an int
    knob's 1), and shrinks a range the step does not tile, which can leave stock off the grid."""
    if _number(path, where, step) <= 0:
        raise space_error(path, where, f"{short_repr(step)} is out of range; allowed: a number > 0")
    if log and (kind == "float" or step != 1):
        extra = "" if kind == "float" else " (an int knob on a log scale takes step 1)"
        raise space_error(path, where, f"cannot be combined with log: true{extra}")
    # in decimals, as Optuna checks it: 0.1 + 3 * 0.2 is 0.7
    low, high = (Decimal(str(b)) for b in bounds)
    steps, left = divmod(high - low, Decimal(str(step)))
    if left:
        below, above = (_num(low + n * Decimal(str(step))) for n in (steps, steps + 1))
        raise space_error(
            path,
            where,
            f"{_num(step)} steps do not reach high {_num(high)} from low {_num(low)}; "
            f"allowed: high {below} or {above}, or a step that divides {_num(high - low)}",
        )


def _num(x: Any) -> str:
    """A bound as the file would write it: 375 (not 375.0), 0.25."""
    x = Decimal(str(x))
    return str(int(x)) if x == x.to_integral_value() else str(x.normalize())


def _parse_choices(path: Path, where: str, kind: str, spec: dict) -> tuple[Any, ...]:
    for k in ("low", "high", "log", "step"):
        if k in spec:
            raise space_error(path, f"{where}.{k}", f"not allowed for type {kind}; use choices")
    if kind == "bool":
        choices = spec.get("choices", [False, True])
        if not choices or not all(isinstance(c, bool) for c in choices):
            raise space_error(
                path,
                f"{where}.choices",
                f"{short_repr(choices)} is not allowed; allowed: a list of true/false",
            )
        return tuple(choices)
    choices = spec.get("choices")
    if not isinstance(choices, list) or not choices:
        raise space_error(
            path,
            f"{where}.choices",
            f"{short_repr(choices)} is not allowed; allowed: a non-empty list",
        )
    for c in choices:
        ok = (
            c is None
            or isinstance(c, (bool, int, float, str))
            or (isinstance(c, list) and all(isinstance(s, str) for s in c))
        )
        if not ok:
            raise space_error(
                path,
                f"{where}.choices",
                f"{short_repr(c)} is not allowed; "
                "allowed: null, numbers, strings or lists of names",
            )
    if any(isinstance(c, list) for c in choices) and not all(isinstance(c, list) for c in choices):
        raise space_error(
            path, f"{where}.choices", "mixes lists and single values; allowed: all lists or none"
        )
    return tuple(choices)


def _parse_when(
    path: Path, where: str, when: Any, earlier: dict[str, Knob]
) -> dict[str, tuple[Any, ...]]:
    if when is None:
        return {}
    if not isinstance(when, dict) or not when:
        raise space_error(
            path,
            f"{where}.when",
            f"{short_repr(when)} has the wrong type; allowed: a mapping of knob key to value(s)",
        )
    out = {}
    for other, value in when.items():
        if other not in earlier:
            raise space_error(
                path,
                f"{where}.when.{other}",
                f"not a knob listed before this one; allowed: {list(earlier)}",
            )
        listed = isinstance(value, list) and (
            not earlier[other].list_valued
            or (bool(value) and all(isinstance(v, list) for v in value))
        )
        values = tuple(value) if listed else (value,)
        for v in values:
            if not earlier[other].contains(v):
                raise space_error(
                    path,
                    f"{where}.when.{other}",
                    f"{short_repr(v)} is not a value knob {other} can take",
                )
        out[other] = values
    return out
