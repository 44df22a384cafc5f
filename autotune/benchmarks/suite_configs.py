"""What the GPU suite measures: named configurations and configuration files, made comparable.

An entry of ``--configs`` is either a name of :data:`CONFIGS` (overrides of the stock
configuration) or a path to a configuration YAML (e.g. a run's ``best.yaml``, loaded strictly
with :func:`autotune.config.load_config`). Every row of one suite trains the same work on the
same data: the suite's preset, batch size, seed and data source are applied to every entry, and
where a file said otherwise the change is recorded (``Entry.adjusted``), never silent.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.config import TrainConfig, config_from_dict, load_config, to_dict
from autotune.errors import ConfigError

ALL_REGIONS = ["vision", "connector", "llm_frozen", "llm_trainable", "vlln", "dit", "projectors"]

CONFIGS: dict[str, dict] = {
    "stock": {},
    "step_graph": {"graphs": {"mode": "step"}},
    "region_graph": {"graphs": {"mode": "regions", "regions": ALL_REGIONS}},
    "precision_fp16_frozen": {"precision": {"regions": {"vision": "fp16", "connector": "fp16", "llm_frozen": "fp16"}}},
    "data_prefetch": {"data": {"num_workers": 8, "device_prefetch": 2, "prefetch_factor": 4}},
    "static_fused_prefetch": {"ddp": {"static_graph": True}, "optimizer": {"impl": "fused"},
                              "data": {"num_workers": 8, "device_prefetch": 2}},
    "step_graph_tuned": {"graphs": {"mode": "step"}, "optimizer": {"impl": "fused"},
                         "data": {"num_workers": 8, "device_prefetch": 2, "prefetch_factor": 4}},
    "compile_all": {"compile": {"regions": ["all"]}},
}
# the same with each bucket's all-reduce captured inside the backward (several GPUs)
CONFIGS["step_graph_tuned_overlap"] = {**CONFIGS["step_graph_tuned"], "ddp": {"graph_overlap": True}}

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
        return out


def builtin(name: str, settings: SuiteSettings) -> Entry:
    over = copy.deepcopy(CONFIGS[name])
    data = over.setdefault("data", {})
    data.setdefault("source", settings.source)
    data.setdefault("video_backend", settings.video_backend)
    cfg = config_from_dict({"preset": settings.preset, "batch_size": settings.batch_size, "seed": settings.seed, **over})
    return Entry(name, cfg, "builtin", overrides=CONFIGS[name])


def row_name(path: Path) -> str:
    """``runs/x/best.yaml`` -> ``x/best``: the run folder says which study the file came from."""
    parent = path.resolve().parent.name
    return f"{parent}/{path.stem}" if parent else path.stem


def from_file(path: Path, settings: SuiteSettings) -> Entry:
    cfg = load_config(path)
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


def resolve(entries: list[str], settings: SuiteSettings) -> list[Entry]:
    """The suite's rows, in the order given; names that repeat get ``#2``, ``#3``, ..."""
    rows: list[Entry] = []
    for text in entries:
        path = Path(text)
        if text in CONFIGS:
            entry = builtin(text, settings)
        elif text.endswith(YAML_SUFFIXES) or path.exists():
            entry = from_file(path, settings)
        else:
            raise ConfigError(f"--configs: {text!r} is neither a configuration name {sorted(CONFIGS)} "
                              "nor a configuration file (*.yaml)")
        taken = {r.name for r in rows}
        base, n = entry.name, 2
        while entry.name in taken:
            entry.name, n = f"{base}#{n}", n + 1
        rows.append(entry)
    return rows
