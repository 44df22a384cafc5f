"""Search spaces: which knobs of :class:`~autotune.config.TrainConfig` a study varies, and how.

A space is a YAML file (``search_spaces/NAME.yaml``) loaded once, strictly, at the edge::

    name: quick
    description: a handful of knobs that work on a CPU
    knobs:
      ddp.bucket_cap_mb: {type: float, low: 25, high: 400, log: true, group: comm}
      graphs.mode: {type: categorical, choices: [none, regions, step], requires: cuda, group: graphs}
      graphs.regions:
        type: categorical
        choices: [[dit], [dit, llm_trainable]]
        when: {graphs.mode: regions}
        group: graphs

``remedy`` is the value that relieves the knob group's bottleneck as a rule (more loader workers
for a data stall, whole-step graphs for launch overhead): the profile-guided search tries it first
when the profile points at that group. An int knob may take ``remedy: cores``: the host cores each
rank has, less two (the training process and the pinning thread), within the knob's range; it is
resolved by :meth:`SearchSpace.for_machine` (loader workers that use the machine they are on).
``remedy_several_ranks`` replaces ``remedy`` when several ranks train (data parallel): the remedy of
one GPU is not always that of several (whole-model compile is on one H200; on two, where the
all-reduce must run beside the backward, compiling block by block is).

Each knob key is a dotted key of the TrainConfig tree (``precision.regions.vision`` addresses one
entry of a mapping), optionally followed by ``@variant``: two knobs of one config key whose ``when``
conditions exclude each other give it different choices in different parts of the space (whole-model
compile only where no region graph is captured: ``compile.regions`` and
``compile.regions@region_graphs``). A ``when`` on a list-valued knob takes one list or a list of them. ``when`` makes the knob exist only while other knobs take the given value(s);
``requires`` (``cuda`` or ``fp8``) drops the knob, with a note, on a machine without it. Every
error names the file and the key, e.g. ``search_spaces/x.yaml: knobs.ddp.bucket_cap_mb.low: ...``.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.resources
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.config import TrainConfig, from_dict, read_yaml, to_dict
from autotune.config.compat import Machine
from autotune.config.knob import GROUPS as KNOB_GROUPS
from autotune.errors import ConfigError, SearchSpaceError
from autotune.search.declared import GROUP_ALIASES, declared, defaults_for

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
EMPTY = "none"  # how an empty list choice is named among Optuna's categorical values


@dataclass(frozen=True)
class Knob:
    """One searched knob: a dotted TrainConfig key and its distribution."""

    key: str
    type: str
    group: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()
    when: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    requires: str | None = None
    doc: str = ""
    remedy: Any = None
    """The value that relieves the group's bottleneck as a rule (tried first when the profile points here)."""
    remedy_several_ranks: Any = None
    """The remedy where several ranks train, when it differs (resolved by :meth:`SearchSpace.for_machine`)."""

    @property
    def list_valued(self) -> bool:
        return any(isinstance(c, list) for c in self.choices)

    def encode(self, value: Any) -> Any:
        """The Optuna parameter value of a config value (lists become ``a+b`` strings)."""
        if self.list_valued:
            return "+".join(value) if value else EMPTY
        return value

    def decode(self, param: Any) -> Any:
        """The config value of an Optuna parameter value."""
        if self.list_valued:
            return [] if param == EMPTY else param.split("+")
        return param

    def contains(self, value: Any) -> bool:
        if self.type in ("categorical", "bool"):
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return self.low <= value <= self.high

    def active(self, params: dict[str, Any]) -> bool:
        """Whether the knob exists given the (decoded) values of the knobs sampled before it."""
        return all(k in params and params[k] in allowed for k, allowed in self.when.items())


@dataclass(frozen=True)
class SearchSpace:
    """A validated search space; ``knobs`` are in sampling order (conditions first)."""

    name: str
    path: Path
    knobs: tuple[Knob, ...]
    description: str = ""

    def for_machine(self, machine: Machine) -> tuple[SearchSpace, list[str]]:
        """The space without the knobs ``machine`` cannot run, and a note for each one dropped."""
        from autotune.config.compat import _has_torchao

        fp8 = machine.cuda and (machine.capability or (0, 0)) >= (8, 9) and _has_torchao()
        have = {"cuda": machine.cuda, "fp8": fp8}
        kept, notes = [], []
        for knob in self.knobs:
            if knob.remedy_several_ranks is not None:
                remedy = knob.remedy_several_ranks if machine.world_size > 1 else knob.remedy
                knob = dataclasses.replace(knob, remedy=remedy, remedy_several_ranks=None)
            if knob.remedy == "cores":
                per_rank = (machine.cpus or os.cpu_count() or 1) // max(1, machine.world_size)
                knob = dataclasses.replace(
                    knob, remedy=int(min(knob.high, max(knob.low, per_rank - 2)))
                )
            if knob.requires and not have[knob.requires]:
                notes.append(f"{knob.key}: dropped, needs {knob.requires}")
            elif (
                not fp8
                and knob.key.startswith("precision.")
                and "fp8" in knob.choices
                and len(knob.choices) > 1
            ):
                # a choice the machine cannot run would only make refused trials
                notes.append(
                    f"{knob.key}: choice fp8 dropped, needs a GPU of compute capability >= 8.9 and torchao"
                )
                kept.append(
                    dataclasses.replace(
                        knob,
                        choices=tuple(c for c in knob.choices if c != "fp8"),
                        remedy=None if knob.remedy == "fp8" else knob.remedy,
                    )
                )
            else:
                kept.append(knob)
        names = {k.key for k in kept}
        # A dropped knob keeps its stock value on this machine (no CUDA: graphs.mode none), so a knob
        # conditional on it stays exactly where that value meets the condition, now without the condition.
        stock = TrainConfig()
        final = [
            dataclasses.replace(k, when={c: a for c, a in k.when.items() if c in names})
            for k in kept
            if all(c in names or get_value(stock, c) in a for c, a in k.when.items())
        ]
        left = {k.key for k in final}
        notes += [
            f"{k.key}: dropped, its condition's knob is dropped" for k in kept if k.key not in left
        ]
        return dataclasses.replace(self, knobs=tuple(final)), notes

    def stock_params(self, base: TrainConfig) -> dict[str, Any]:
        """Optuna parameters of ``base`` (the stock configuration) for every active knob."""
        values: dict[str, Any] = {}
        for knob in self.knobs:
            if knob.active(values):
                values[knob.key] = get_value(base, knob.key)
                if not knob.contains(values[knob.key]):
                    raise _err(
                        self.path,
                        f"knobs.{knob.key}",
                        f"the stock value {values[knob.key]!r} is outside the "
                        "space; the stock configuration is the first trial, so the space must contain it",
                    )
        return {k.key: k.encode(values[k.key]) for k in self.knobs if k.key in values}


# ---------------------------------------------------------------- dotted keys on a TrainConfig


def config_key(key: str) -> str:
    """The TrainConfig key a knob sets: its key without the ``@variant``."""
    return key.partition("@")[0]


def get_value(cfg: TrainConfig, key: str) -> Any:
    """The value of dotted ``key``; ``precision.regions.R`` is the precision region R runs in."""
    parts = config_key(key).split(".")
    if parts[:2] == ["precision", "regions"] and len(parts) == 3:
        return cfg.precision.of(parts[2])
    obj: Any = cfg
    for part in parts:
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return copy.deepcopy(obj)


def apply_values(base: TrainConfig, values: dict[str, Any]) -> TrainConfig:
    """A new configuration: ``base`` with each dotted key set, validated like a loaded file."""
    data = to_dict(base)
    for key, value in values.items():
        *parents, leaf = config_key(key).split(".")
        node = data
        for part in parents:
            node = node[part]
        node[leaf] = copy.deepcopy(value)
    return from_dict(TrainConfig, data)


def _check_key(key: str) -> None:
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
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if part not in fields or part in (
            "schema_version",
            "provenance",
            "workload",
            "preset",
            "options",
        ):
            raise ConfigError(
                f"not a knob of the training configuration; allowed at this level: "
                f"{sorted(n for n in fields if n not in ('schema_version', 'provenance', 'options'))}"
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


def typing_hints(cls: type) -> dict[str, Any]:
    import typing

    return typing.get_type_hints(cls)


# ---------------------------------------------------------------- loading


def _err(path: Path, key: str, message: str) -> SearchSpaceError:
    return SearchSpaceError(f"{path}: {key}: {message}")


def _number(path: Path, where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _err(path, where, f"{value!r} has the wrong type; allowed: a number")
    return value


def _with_declared(key: str, spec: Any) -> Any:
    """A file's entry completed from the knob's declaration (:mod:`autotune.search.declared`)."""
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        return spec
    spec = {**defaults_for(key, spec), **spec}
    if spec.get("group") in GROUP_ALIASES:
        spec["group"] = GROUP_ALIASES[spec["group"]]
    return spec


def _parse_knob(path: Path, key: str, spec: Any, earlier: dict[str, Knob]) -> Knob:
    where = f"knobs.{key}"
    if not isinstance(spec, dict):
        raise _err(
            path, where, f"{spec!r} has the wrong type; allowed: a mapping with 'type' and 'group'"
        )
    unknown = [k for k in spec if k not in KNOB_KEYS]
    if unknown:
        raise _err(path, f"{where}.{unknown[0]}", f"unknown key; allowed: {list(KNOB_KEYS)}")
    try:
        _check_key(key)
    except ConfigError as exc:
        raise _err(path, where, str(exc)) from None
    kind = spec.get("type")
    if kind not in TYPES:
        raise _err(path, f"{where}.type", f"{kind!r} is not one of {list(TYPES)}")
    group = spec.get("group")
    if group not in GROUPS:
        raise _err(path, f"{where}.group", f"{group!r} is not one of {list(GROUPS)}")
    requires = spec.get("requires")
    if requires is not None and requires not in REQUIREMENTS:
        raise _err(path, f"{where}.requires", f"{requires!r} is not one of {list(REQUIREMENTS)}")
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
    if "remedy" in spec:
        remedy = spec["remedy"]
        if remedy == "cores" and kind == "int":
            pass  # resolved per machine (for_machine)
        elif remedy is None or not knob.contains(remedy):
            raise _err(path, f"{where}.remedy", f"{remedy!r} is not a value this knob can take")
        knob = dataclasses.replace(knob, remedy=remedy)
    if "remedy_several_ranks" in spec:
        several = spec["remedy_several_ranks"]
        if knob.remedy is None:
            raise _err(
                path,
                f"{where}.remedy_several_ranks",
                "needs a remedy (the one of a single rank) beside it",
            )
        if several is None or not knob.contains(several):
            raise _err(
                path,
                f"{where}.remedy_several_ranks",
                f"{several!r} is not a value this knob can take",
            )
        knob = dataclasses.replace(knob, remedy_several_ranks=several)
    return knob


def _parse_range(path: Path, where: str, kind: str, spec: dict) -> dict[str, Any]:
    if "choices" in spec:
        raise _err(path, f"{where}.choices", f"not allowed for type {kind}; use low and high")
    for k in ("low", "high"):
        if k not in spec:
            raise _err(path, f"{where}.{k}", f"missing; a {kind} knob needs low and high")
    low, high = (
        _number(path, f"{where}.low", spec["low"]),
        _number(path, f"{where}.high", spec["high"]),
    )
    if kind == "int":
        for k in ("low", "high", "step"):
            if k in spec and not isinstance(spec[k], int):
                raise _err(
                    path, f"{where}.{k}", f"{spec[k]!r} has the wrong type; allowed: an integer"
                )
    if not low <= high:
        raise _err(path, f"{where}.low", f"low <= high must hold, but got (low={low}, high={high})")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise _err(path, f"{where}.log", f"{log!r} has the wrong type; allowed: true or false")
    step = spec.get("step")
    if step is not None and _number(path, f"{where}.step", step) <= 0:
        raise _err(path, f"{where}.step", f"{step!r} is out of range; allowed: a number > 0")
    if log and low <= 0:
        raise _err(
            path, f"{where}.low", f"{low!r} is out of range; allowed: a number > 0 when log is true"
        )
    if log and step is not None and kind == "float":
        raise _err(path, f"{where}.step", "cannot be combined with log: true")
    return {"low": low, "high": high, "log": log, "step": step}


def _parse_choices(path: Path, where: str, kind: str, spec: dict) -> tuple[Any, ...]:
    for k in ("low", "high", "log", "step"):
        if k in spec:
            raise _err(path, f"{where}.{k}", f"not allowed for type {kind}; use choices")
    if kind == "bool":
        choices = spec.get("choices", [False, True])
        if not choices or not all(isinstance(c, bool) for c in choices):
            raise _err(
                path,
                f"{where}.choices",
                f"{choices!r} is not allowed; allowed: a list of true/false",
            )
        return tuple(choices)
    choices = spec.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _err(
            path, f"{where}.choices", f"{choices!r} is not allowed; allowed: a non-empty list"
        )
    for c in choices:
        ok = (
            c is None
            or isinstance(c, (bool, int, float, str))
            or (isinstance(c, list) and all(isinstance(s, str) for s in c))
        )
        if not ok:
            raise _err(
                path,
                f"{where}.choices",
                f"{c!r} is not allowed; allowed: null, numbers, strings or lists of names",
            )
    if any(isinstance(c, list) for c in choices) and not all(isinstance(c, list) for c in choices):
        raise _err(
            path, f"{where}.choices", "mixes lists and single values; allowed: all lists or none"
        )
    return tuple(choices)


def _parse_when(
    path: Path, where: str, when: Any, earlier: dict[str, Knob]
) -> dict[str, tuple[Any, ...]]:
    if when is None:
        return {}
    if not isinstance(when, dict) or not when:
        raise _err(
            path,
            f"{where}.when",
            f"{when!r} has the wrong type; allowed: a mapping of knob key to value(s)",
        )
    out = {}
    for other, value in when.items():
        if other not in earlier:
            raise _err(
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
                raise _err(
                    path, f"{where}.when.{other}", f"{v!r} is not a value knob {other} can take"
                )
        out[other] = values
    return out


def _check_values(path: Path, knob: Knob, stock: TrainConfig) -> None:
    """Every extreme value must make a valid configuration (the stock value is checked by ``stock_params``)."""
    values = knob.choices if knob.choices else (knob.low, knob.high)
    if knob.type == "int":
        values = tuple(int(v) for v in values)
    context = {k: allowed[0] for k, allowed in knob.when.items()}
    for v in values:
        try:
            apply_values(stock, {**context, knob.key: v})
        except ConfigError as exc:
            if str(exc).split(":")[0] != config_key(knob.key):
                continue  # a rule between knobs (graphs.mode regions needs graphs.regions): the trial decides
            raise _err(path, f"knobs.{knob.key}", f"{v!r} is not a valid value ({exc})") from None


def _check_variants(path: Path, knob: Knob, earlier: dict[str, Knob]) -> None:
    """Knobs of one config key must never be active together: some knob's conditions exclude each other."""
    for other in earlier.values():
        if other.key == knob.key or config_key(other.key) != config_key(knob.key):
            continue
        common = set(knob.when) & set(other.when)
        if not any(not set(knob.when[c]) & set(other.when[c]) for c in common):
            raise _err(
                path,
                f"knobs.{knob.key}",
                f"sets {config_key(knob.key)} as knob {other.key} does; their 'when' "
                "conditions must exclude each other (give one knob disjoint values)",
            )


def region_names(knob: Knob) -> list[str]:
    """The region names a knob addresses: a per-region precision's, or those its list choices name."""
    parts = config_key(knob.key).split(".")
    if parts[:2] == ["precision", "regions"]:
        return [parts[2]]
    if config_key(knob.key) in (
        "graphs.regions",
        "compile.regions",
        "checkpointing.regions",
        "model.freeze",
        "model.unfreeze",
    ):
        return list(
            dict.fromkeys(r for c in knob.choices if isinstance(c, list) for r in c if r != "all")
        )
    return []


def check_regions(space: SearchSpace, regions: tuple[str, ...] | list[str], workload: str) -> None:
    """Refuse a space naming a region the workload does not have (one line: the knob, the name, the regions)."""
    for knob in space.knobs:
        for name in region_names(knob):
            if name not in regions:
                raise SearchSpaceError(
                    f"{space.path}: knobs.{knob.key}: {name!r} is not a region of workload "
                    f"{workload!r}; its regions: {sorted(regions)} (or run without --space: "
                    "a space made from its regions)"
                )


def parse_space(data: Any, path: Path) -> SearchSpace:
    if not isinstance(data, dict):
        raise SearchSpaceError(
            f"{path}: {data!r} has the wrong type; allowed: a mapping with 'knobs'"
        )
    unknown = [k for k in data if k not in ("name", "description", "knobs")]
    if unknown:
        raise _err(path, str(unknown[0]), "unknown key; allowed: ['description', 'knobs', 'name']")
    knobs_data = data.get("knobs")
    if not isinstance(knobs_data, dict) or not knobs_data:
        raise _err(
            path,
            "knobs",
            f"{knobs_data!r} is not allowed; allowed: a non-empty mapping of dotted keys",
        )
    knobs: dict[str, Knob] = {}
    stock = TrainConfig()
    for key, spec in knobs_data.items():
        knob = _parse_knob(path, str(key), _with_declared(str(key), spec), knobs)
        _check_values(path, knob, stock)
        _check_variants(path, knob, knobs)
        knobs[knob.key] = knob
    name = data.get("name", path.stem)
    return SearchSpace(
        name=str(name),
        path=path,
        knobs=tuple(knobs.values()),
        description=str(data.get("description", "")),
    )


def spaces_dir() -> Path:
    """The folder of the shipped spaces: ``search_spaces`` inside the installed package.

    A wheel carries the files there as package data; in the repository ``autotune/search_spaces`` is
    a link to the top-level ``search_spaces/``, so a name resolves the same in an editable install.
    """
    return Path(str(importlib.resources.files("autotune") / "search_spaces"))


def list_spaces() -> list[str]:
    return sorted(p.stem for p in spaces_dir().glob("*.yaml"))


def load_space(name_or_path: str | os.PathLike) -> SearchSpace:
    """A shipped space by name (``quick``) or a space file by path; an unknown name lists the known ones."""
    text = str(name_or_path)
    path = Path(text)
    if not (text.endswith((".yaml", ".yml")) or os.sep in text or path.exists()):
        path = spaces_dir() / f"{text}.yaml"
        if not path.exists():
            raise SearchSpaceError(
                f"search space {text!r} is unknown; known spaces: {list_spaces()} (or give a path to a YAML file)"
            )
    try:
        data = read_yaml(path)
    except SearchSpaceError:
        raise
    except ConfigError as exc:
        raise SearchSpaceError(str(exc)) from None
    return parse_space(data, path)
