"""A search space in memory: its knobs (:class:`Knob`: a dotted TrainConfig key and its
distribution), the space (:class:`SearchSpace`) and the dotted keys read and set on a
configuration. The YAML file a space comes from is read by :mod:`autotune.search.space`."""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.config import TrainConfig, from_dict, to_dict
from autotune.config.compat import Machine
from autotune.errors import SearchSpaceError

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
        return self.low <= value <= self.high and self.on_steps(value)

    def on_steps(self, value: float) -> bool:
        """Whether ``value`` is ``low`` plus whole steps (an int knob's step is 1), as Optuna
        checks a value of its distribution."""
        step = self.step or (1 if self.type == "int" else None)
        if step is None:
            return True
        k = (value - self.low) / step
        return abs(k - round(k)) < 1e-8

    def values_text(self) -> str:
        """What the knob takes, as an error says it: ``['a', 'b']``, ``an integer in [0, 2]``."""
        if self.type in ("categorical", "bool"):
            return str(list(self.choices))
        kind = "an integer" if self.type == "int" else "a number"
        steps = f" in steps of {self.step:g}" if self.step else ""
        return f"{kind} in [{self.low:g}, {self.high:g}]{steps}"

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

    def for_machine(
        self, machine: Machine, loads_data: bool = True
    ) -> tuple[SearchSpace, list[str]]:
        """The space without the knobs ``machine`` cannot run, nor the loader's where the run reads
        no dataset (``loads_data`` False: synthetic batches, which no loader knob changes), and a
        note for each one dropped."""
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
            if knob.key.startswith("data.") and not loads_data:
                notes.append(f"{knob.key}: dropped, the run reads no dataset (synthetic batches)")
            elif knob.requires and not have[knob.requires]:
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

    def values_of(self, cfg: TrainConfig) -> dict[str, Any]:
        """The values ``cfg`` gives the knobs active in it, by key (unchecked)."""
        values: dict[str, Any] = {}
        for knob in self.knobs:
            if knob.active(values):
                values[knob.key] = get_value(cfg, knob.key)
        return values

    def outside(self, cfg: TrainConfig) -> tuple[Knob, Any] | None:
        """The first knob active in ``cfg`` whose value there the space does not hold, and that value."""
        values = self.values_of(cfg)
        for knob in self.knobs:
            if knob.key in values and not knob.contains(values[knob.key]):
                return knob, values[knob.key]
        return None

    def stock_params(self, base: TrainConfig) -> dict[str, Any]:
        """Optuna parameters of ``base`` (the stock configuration) for every active knob."""
        if (found := self.outside(base)) is not None:
            knob, value = found
            raise space_error(
                self.path,
                f"knobs.{knob.key}",
                f"the stock value {value!r} is outside the space{off_steps(knob, value)}; the "
                "stock configuration is the first trial, so the space must contain it",
            )
        values = self.values_of(base)
        return {k.key: k.encode(values[k.key]) for k in self.knobs if k.key in values}


def off_steps(knob: Knob, value: Any) -> str:
    """Why a value within a knob's range is outside it anyway, or nothing."""
    within = (
        knob.low is not None and isinstance(value, (int, float)) and not isinstance(value, bool)
    )
    if within and knob.low <= value <= knob.high and not knob.on_steps(value):
        return f" (not {knob.low:g} plus whole steps of {knob.step or 1:g})"
    return ""


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


def space_error(path: Path, key: str, message: str) -> SearchSpaceError:
    """The error of a space file: ``PATH: KEY: MESSAGE``."""
    return SearchSpaceError(f"{path}: {key}: {message}")
