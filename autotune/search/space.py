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
resolved by :meth:`~autotune.search.knobs.SearchSpace.for_machine` (loader workers that use the
machine they are on).
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

import dataclasses
import importlib.resources
import os
import re
from pathlib import Path
from typing import Any

from autotune.config import TrainConfig, read_yaml
from autotune.errors import ConfigError, SearchSpaceError, kind_of, short_repr
from autotune.search.declared import GROUP_ALIASES, defaults_for
from autotune.search.knob_entry import parse_knob
from autotune.search.knobs import Knob, SearchSpace, apply_values, config_key, space_error


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
            raise space_error(
                path, f"knobs.{knob.key}", f"{short_repr(v)} is not a valid value ({exc})"
            ) from None


def _check_variants(path: Path, knob: Knob, earlier: dict[str, Knob]) -> None:
    """Knobs of one config key must never be active together: some knob's conditions exclude each other."""
    for other in earlier.values():
        if other.key == knob.key or config_key(other.key) != config_key(knob.key):
            continue
        common = set(knob.when) & set(other.when)
        if not any(not set(knob.when[c]) & set(other.when[c]) for c in common):
            raise space_error(
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
                    f"{space.path}: knobs.{knob.key}: {short_repr(name)} "
                    "is not a region of workload "
                    f"{workload!r}; its regions: {sorted(regions)} (or run without --space: "
                    "a space made from its regions)"
                )


def check_model_knobs(space: SearchSpace, knobs: type | None, workload: str) -> None:
    """Refuse a ``model.*`` knob the workload does not declare (a space file is read before its
    workload is known, so any workload's model knob parses; the trial could not set it)."""
    own = [f.name for f in dataclasses.fields(knobs)] if knobs is not None else []
    allowed = sorted(["freeze", "unfreeze", *own])
    for knob in space.knobs:
        section, _, name = config_key(knob.key).partition(".")
        if section == "model" and name not in allowed:
            raise SearchSpaceError(
                f"{space.path}: knobs.{knob.key}: not a model knob of workload {workload!r}; "
                f"its model knobs: {allowed}"
            )


def parse_space(data: Any, path: Path) -> SearchSpace:
    if not isinstance(data, dict):
        raise SearchSpaceError(
            f"{path}: {kind_of(data)} has the wrong type; allowed: a mapping with 'knobs'"
        )
    unknown = [k for k in data if k not in ("name", "description", "knobs")]
    if unknown:
        raise space_error(
            path, str(unknown[0]), "unknown key; allowed: ['description', 'knobs', 'name']"
        )
    knobs_data = data.get("knobs")
    if not isinstance(knobs_data, dict) or not knobs_data:
        raise space_error(
            path,
            "knobs",
            f"{short_repr(knobs_data)} is not allowed; allowed: a non-empty mapping of dotted keys",
        )
    knobs: dict[str, Knob] = {}
    stock = TrainConfig()
    for key, spec in knobs_data.items():
        knob = parse_knob(path, str(key), _with_declared(str(key), spec), knobs)
        _check_values(path, knob, stock)
        _check_variants(path, knob, knobs)
        knobs[knob.key] = knob
    name = data.get("name", path.stem)
    if "name" in data and not (isinstance(name, str) and re.fullmatch(r"[\w.-]+", name)):
        # it names the study and its default folder, runs/WORKLOAD-PRESET-NAME: no path in it
        raise SearchSpaceError(
            f"{path}: name: {short_repr(name)} is not allowed; "
            "allowed: letters, digits, '_', '.' and '-'"
        )
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
