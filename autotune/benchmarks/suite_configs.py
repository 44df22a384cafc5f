"""What the GPU suite measures: named configurations and configuration files, made comparable.

An entry of ``--configs`` is either a name of :data:`CONFIGS` (overrides of the stock
configuration) or a path to a configuration YAML (e.g. a run's ``best.yaml``, loaded strictly
with :func:`autotune.config.load_config`), optionally followed by knobs set on top of it, each as
``+KEY=VALUE`` (a dotted key of the training configuration, the value in YAML), e.g.
``runs/x/best.yaml+model.attended_kv_only=true+optimizer.streams=2``; a ``+`` followed by anything
but a dotted key and ``=`` stays where it is (``optimizer.lr=1.0e+4``). Every row of one suite
trains the same work on the same data: the suite's preset, batch size, seed and data source are
applied to every entry, and where a file said otherwise the change is recorded
(``Entry.adjusted``), never silent.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from autotune.config import TrainConfig, config_from_dict, load_config, to_dict
from autotune.config.compat import Machine, check_compatible
from autotune.errors import ConfigError, IncompatibleConfigError

ALL_REGIONS = ["vision", "connector", "llm_frozen", "llm_trainable", "vlln", "dit", "projectors"]

CONFIGS: dict[str, dict] = {
    "stock": {},
    "step_graph": {"graphs": {"mode": "step"}},
    "region_graph": {"graphs": {"mode": "regions", "regions": ALL_REGIONS}},
    "precision_fp16_frozen": {
        "precision": {"regions": {"vision": "fp16", "connector": "fp16", "llm_frozen": "fp16"}}
    },
    "data_prefetch": {"data": {"num_workers": 8, "device_prefetch": 2, "prefetch_factor": 4}},
    "compile_all": {"compile": {"regions": ["all"]}},
}
"""Built-in rows: what a user would try by hand instead of a study (overrides of stock)."""

YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class SuiteSettings:
    """What every row of one suite shares, so that the rows compare the same work."""

    preset: str
    batch_size: int
    source: str
    """``data.source``: ``lerobot`` (the project's data path) or ``synthetic``."""
    video_backend: str
    seed: int = 0
    workload: str = "gr00t_n16"
    """The workload every row trains; a file of another workload is refused (one line)."""


@dataclass
class Entry:
    """One row of the suite: its name, the configuration it trains and where that came from."""

    name: str
    config: TrainConfig
    source: str
    """``builtin`` (a :data:`CONFIGS` name) or the path of the YAML file."""
    overrides: dict[str, Any] | None = None
    """For builtin entries: the overrides of the stock configuration."""
    provenance: dict[str, Any] | None = None
    """For files written by ``autotune run``: how the configuration was found."""
    adjusted: dict[str, list[Any]] = field(default_factory=dict)
    """Fields of the file the suite changed to its own setting: ``{key: [file's, suite's]}``."""
    knobs: dict[str, Any] | None = None
    """The knobs set on top of the entry (``ENTRY+KEY=VALUE``), by dotted key."""
    skipped: str | None = None
    """Why the row is not run on this machine (``--fit-machine``), or None."""

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source}
        if self.overrides is not None:
            out["overrides"] = self.overrides
        if self.source != "builtin":
            out["config"] = to_dict(self.config)
            out["config"].pop("provenance", None)
        if self.provenance is not None:
            out["provenance"] = self.provenance
        if self.adjusted:
            out["adjusted"] = self.adjusted
        if self.knobs is not None:
            out["knobs"] = self.knobs
        return out


def region_names(workload: str, preset: str) -> list[str]:
    """The regions of ``workload``'s region map, in its order (:meth:`Workload.region_trains`)."""
    from autotune.workloads import get_workload

    return list(get_workload(workload).region_trains(preset))


def builtin(name: str, settings: SuiteSettings) -> Entry:
    over = copy.deepcopy(CONFIGS[name])
    if name == "region_graph" and settings.workload != "gr00t_n16":  # every region of its own
        over["graphs"]["regions"] = region_names(settings.workload, settings.preset)
    data = over.setdefault("data", {})
    data.setdefault("source", settings.source)
    data.setdefault("video_backend", settings.video_backend)
    cfg = config_from_dict(
        {
            "workload": settings.workload,
            "preset": settings.preset,
            "batch_size": settings.batch_size,
            "seed": settings.seed,
            **over,
        }
    )
    return Entry(name, cfg, "builtin", overrides=CONFIGS[name])


def row_name(path: Path) -> str:
    """``runs/x/best.yaml`` -> ``x/best``: the run folder says which study the file came from."""
    parent = path.resolve().parent.name
    return f"{parent}/{path.stem}" if parent else path.stem


def from_file(path: Path, settings: SuiteSettings) -> Entry:
    cfg = load_config(path)
    if cfg.workload != settings.workload:
        raise ConfigError(
            f"--configs: {path} trains workload {cfg.workload!r}; the suite measures "
            f"{settings.workload!r} (give --workload {cfg.workload})"
        )
    provenance = copy.deepcopy(cfg.provenance)
    cfg.provenance = None
    stock = TrainConfig()
    wanted = {
        "preset": settings.preset,
        "batch_size": settings.batch_size,
        "seed": settings.seed,
        "data.source": settings.source,
        "data.video_backend": settings.video_backend,
        "data.dataset": stock.data.dataset,
        "data.episodes": stock.data.episodes,
    }
    adjusted: dict[str, list[Any]] = {}
    for key, value in wanted.items():
        *parents, leaf = key.split(".")
        owner = cfg
        for p in parents:
            owner = getattr(owner, p)
        if getattr(owner, leaf) != value:
            adjusted[key] = [getattr(owner, leaf), value]
            setattr(owner, leaf, value)
    # Re-validate the tree after the changes (e.g. a prefetch factor needs workers).
    cfg = config_from_dict(json.loads(json.dumps(to_dict(cfg))))
    return Entry(row_name(path), cfg, str(path), provenance=provenance, adjusted=adjusted)


def merge(base: dict, over: dict) -> dict:
    """``base`` with ``over``'s values, mappings merged key by key."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = (
            merge(out[key], value)
            if isinstance(value, dict) and isinstance(out.get(key), dict)
            else copy.deepcopy(value)
        )
    return out


def parse_knobs(text: str, pairs: list[str]) -> dict[str, Any]:
    """``["model.x=true", "optimizer.streams=2"]`` -> ``{"model.x": True, "optimizer.streams": 2}``."""
    knobs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"--configs: {pair!r} of {text!r} is not KEY=VALUE "
                "(e.g. runs/x/best.yaml+model.attended_kv_only=true)"
            )
        try:
            knobs[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(
                f"--configs: {pair!r} of {text!r}: the value is not YAML (e.g. true, 2, [all])"
            ) from None
    return knobs


def nested(knobs: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys as the mapping a configuration file would hold."""
    out: dict[str, Any] = {}
    for key, value in knobs.items():
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def with_knobs(entry: Entry, text: str, knobs: dict[str, Any], spelled: str) -> Entry:
    """The entry with ``knobs`` set on top, validated like a loaded file; the row is named after the
    entry with the knobs as ``text`` spells them, ``spelled`` (``x/best+model.attended_kv_only=true``)."""
    over = nested(knobs)
    try:
        cfg = config_from_dict(merge(to_dict(entry.config), over))
    except ConfigError as exc:
        raise ConfigError(f"--configs: {text!r}: {exc}") from None
    overrides = merge(entry.overrides, over) if entry.overrides is not None else None
    return Entry(
        entry.name + spelled,
        cfg,
        entry.source,
        overrides=overrides,
        provenance=entry.provenance,
        adjusted=dict(entry.adjusted),
        knobs=knobs,
    )


KNOB_START = re.compile(r"\+(?=[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*=)")
"""A ``+`` that starts a knob of an entry: a dotted key and ``=`` follow it. Any other ``+`` is part
of what it is in: a value's (``optimizer.lr=1.0e+4``), a path's (``runs/a+b/best.yaml``)."""


def split_entry(text: str) -> tuple[str, list[str]]:
    """``x.yaml+optimizer.lr=1.0e+4+optimizer.streams=2`` -> ``("x.yaml", ["optimizer.lr=1.0e+4",
    "optimizer.streams=2"])``: the entry and the ``KEY=VALUE`` knobs set on top of it."""
    base, *pairs = KNOB_START.split(text)
    return base, pairs


def _entry(text: str, settings: SuiteSettings) -> Entry:
    base, pairs = split_entry(text)
    if base in CONFIGS:
        entry = builtin(base, settings)
    elif base.endswith(YAML_SUFFIXES) or Path(base).exists():
        entry = from_file(Path(base), settings)
    else:
        _refuse_entry(text, base)
    if not pairs:
        return entry
    return with_knobs(entry, text, parse_knobs(text, pairs), text[len(base) :])


def _refuse_entry(text: str, base: str) -> NoReturn:
    """An entry that is neither a name nor a file: one followed by something that is not a knob
    (``stock+fast``) is named as such."""
    known, plus, rest = base.partition("+")
    if plus and (known in CONFIGS or known.endswith(YAML_SUFFIXES) or Path(known).exists()):
        raise ConfigError(
            f"--configs: {rest!r} of {text!r} is not KEY=VALUE "
            "(e.g. runs/x/best.yaml+model.attended_kv_only=true)"
        )
    raise ConfigError(
        f"--configs: {text!r} is neither a configuration name {sorted(CONFIGS)} "
        "nor a configuration file (*.yaml)"
    )


def resolve(entries: list[str], settings: SuiteSettings) -> list[Entry]:
    """The suite's rows, in the order given; names that repeat get ``#2``, ``#3``, ..."""
    rows: list[Entry] = []
    for text in entries:
        entry = _entry(text, settings)
        taken = {r.name for r in rows}
        base, n = entry.name, 2
        while entry.name in taken:
            entry.name, n = f"{base}#{n}", n + 1
        rows.append(entry)
    return rows


def reset(entry: Entry, keys: list[str]) -> None:
    """Set each dotted key of ``entry``'s configuration to its stock value (``--reset``), recorded
    in ``entry.adjusted``."""
    stock = to_dict(TrainConfig())
    data = to_dict(entry.config)
    for key in keys:
        *parents, leaf = key.split(".")
        node, base = data, stock
        for part in parents:
            if not isinstance(node.get(part), dict):
                raise ConfigError(f"--reset: {key!r} is not a key of the training configuration")
            node, base = node[part], base[part]
        if leaf not in node:
            raise ConfigError(f"--reset: {key!r} is not a key of the training configuration")
        if node[leaf] != base[leaf]:
            entry.adjusted[key] = [node[leaf], base[leaf]]
            node[leaf] = copy.deepcopy(base[leaf])
    entry.config = config_from_dict(data)


def fit_to_machine(entry: Entry, machine: Machine, regions: list[str]) -> str | None:
    """Reset to stock each knob that ``machine`` refuses (``--fit-machine``: CUDA graphs, the device
    prefetcher, CUDA attention backends on a CPU); a row that then still cannot run, or whose
    precision the machine lacks (fp8), is not fitted: its reason is returned and the row is skipped."""
    for _ in range(16):
        try:
            check_compatible(entry.config, machine, regions)
            return None
        except IncompatibleConfigError as exc:
            key = str(exc).split(":")[0]
            if key in ("precision", "device") or "." not in key:
                return str(exc)
            before = dict(entry.adjusted)
            reset(entry, [key])
            if (
                entry.adjusted == before
            ):  # a rule between knobs that resetting this one does not satisfy
                return str(exc)
    return "the configuration could not be fitted to this machine"
