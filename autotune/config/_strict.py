"""Strict conversion between plain YAML data and trees of dataclasses.

``from_dict`` walks a dataclass type and the data together. An unknown key, a missing value of
the wrong type or a value that a ``__post_init__`` rejects raises :class:`ConfigError` naming the
dotted key, the bad value and what is allowed, e.g.
``ddp.bucket_cap_mb: -1 is out of range; allowed: a number > 0``. Every float is finite and every
integer fits in 64 bits, whatever the field (``optimizer.lr: inf is out of range``).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from autotune.errors import ConfigError, kind_of, short_repr

T = TypeVar("T")

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
"""Every integer of a configuration fits in 64 bits (what torch and numpy take); a float field is
finite: YAML's ``.inf`` and ``.nan`` are never a learning rate, an epsilon or a bucket size."""

OMIT_NONE = {"omit_none": True}
"""Field metadata: :func:`to_dict` leaves the field out while it is None (its default), so that a
configuration carries only the fields that apply to it (a workload's own data fields)."""


class FieldError(ConfigError):
    """Raised inside ``__post_init__``: ``key`` is relative to the dataclass it sits in."""

    def __init__(self, key: str, value: Any, allowed: str, problem: str = "is not allowed") -> None:
        self.key, self.value, self.allowed, self.problem = key, value, allowed, problem
        super().__init__(f"{key}: {short_repr(value)} {problem}; allowed: {allowed}")

    def at(self, prefix: str) -> ConfigError:
        key = f"{prefix}.{self.key}" if prefix else self.key
        return ConfigError(
            f"{key}: {short_repr(self.value)} {self.problem}; allowed: {self.allowed}"
        )


def check(cond: bool, key: str, value: Any, allowed: str, problem: str = "is out of range") -> None:
    """Raise a :class:`FieldError` for ``key`` unless ``cond`` holds."""
    if not cond:
        raise FieldError(key, value, allowed, problem)


def check_choice(key: str, value: Any, choices: typing.Iterable[Any]) -> None:
    choices = list(choices)
    check(value in choices, key, value, str(choices), "is not one of the choices")


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return str(list(get_args(tp)))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if tp is type(None):
        return "null"
    if origin is not None:
        args = ", ".join(_type_name(a) for a in get_args(tp))
        return f"{origin.__name__}[{args}]"
    if dataclasses.is_dataclass(tp):
        return f"a mapping ({tp.__name__})"
    return getattr(tp, "__name__", str(tp))


def _convert(tp: Any, value: Any, key: str) -> Any:
    origin = get_origin(tp)
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(f"{key}: {short_repr(value)} is not one of {list(get_args(tp))}")
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, key)
            except ConfigError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        raise ConfigError(
            f"{key}: {short_repr(value)} has the wrong type; allowed: {_type_name(tp)}"
        )
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key)
    if origin is list or origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: {short_repr(value)} has the wrong type; allowed: a list")
        (item_tp, *_) = get_args(tp) or (Any,)
        items = [_convert(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: {short_repr(value)} has the wrong type; allowed: a mapping")
        k_tp, v_tp = get_args(tp) or (Any, Any)
        return {_convert(k_tp, k, key): _convert(v_tp, v, f"{key}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(
                f"{key}: {short_repr(value)} has the wrong type; allowed: true or false"
            )
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: {short_repr(value)} has the wrong type; allowed: an integer")
        if not INT_MIN <= value <= INT_MAX:
            raise ConfigError(
                f"{key}: {short_repr(value)} is out of range; allowed: a 64-bit integer"
            )
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: {short_repr(value)} has the wrong type; allowed: a number"
                              f"{_yaml_number_hint(value)}")  # fmt: skip
        if not math.isfinite(value):
            raise ConfigError(
                f"{key}: {short_repr(value)} is out of range; allowed: a finite number"
            )
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: {short_repr(value)} has the wrong type; allowed: a string")
        return value
    raise TypeError(f"unsupported config type {tp!r} at {key}")  # a bug in the schema


def _yaml_number_hint(value: Any) -> str:
    """YAML 1.1 reads ``1e-4`` (no dot in the mantissa) as text: say how to write it as a number."""
    if not isinstance(value, str):
        return ""
    try:
        number = float(value)
    except ValueError:
        return ""
    if not math.isfinite(number):
        return ""
    mantissa, _, exponent = value.lower().partition("e")
    shown = f"{mantissa}.0e{exponent}" if exponent and "." not in mantissa else repr(number)
    return f" (YAML reads {value} as text; write {shown})"


def from_dict(cls: type[T], data: Any, prefix: str = "") -> T:
    """Build dataclass ``cls`` from ``data`` strictly (see the module docstring)."""
    where = prefix or "the configuration"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        shown = kind_of(data) if not prefix else short_repr(data)  # a whole file: never echoed
        raise ConfigError(f"{where}: {shown} has the wrong type; allowed: a mapping")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = f"{prefix}.{unknown[0]}" if prefix else str(unknown[0])
        raise ConfigError(f"{key}: unknown key; allowed: {sorted(fields)}")
    kwargs = {}
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else name
        parse = fields[name].metadata.get("parse")  # a field parsed with what its siblings say
        kwargs[name] = parse(value, key, data) if parse else _convert(hints[name], value, key)
    try:
        return cls(**kwargs)
    except FieldError as exc:
        raise exc.at(prefix) from None


def to_dict(obj: Any) -> Any:
    """Plain data (dicts, lists, scalars) for a dataclass tree, in field order."""
    if dataclasses.is_dataclass(obj):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if not f.init or (f.metadata.get("omit_none") and value is None):
                continue
            if f.metadata.get("flatten"):  # a nested dataclass whose fields sit beside its parent's
                out.update(to_dict(value) if value is not None else {})
            else:
                out[f.name] = to_dict(value)
        return out
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj
