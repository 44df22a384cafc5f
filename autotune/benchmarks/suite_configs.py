"""What the GPU suite measures: named configurations and configuration files, made comparable.

An entry of ``--configs`` is either a name of :data:`CONFIGS` (overrides of the stock
configuration) or a path to a configuration YAML (e.g. a run's ``best.yaml``, loaded strictly
with :func:`autotune.config.load_config`), optionally followed by ``+VARIANT`` (a name of
:data:`VARIANTS`: overrides applied on top, e.g. ``runs/x/best.yaml+exact``); ``best-1gpu`` names
the current 1-GPU best (:data:`BEST_1GPU`). Every row of one suite trains the same work on the
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
    "static_fused_prefetch": {
        "ddp": {"static_graph": True},
        "optimizer": {"impl": "fused"},
        "data": {"num_workers": 8, "device_prefetch": 2},
    },
    "step_graph_tuned": {
        "graphs": {"mode": "step"},
        "optimizer": {"impl": "fused"},
        "data": {"num_workers": 8, "device_prefetch": 2, "prefetch_factor": 4},
    },
    "compile_all": {"compile": {"regions": ["all"]}},
}
# the same with each bucket's all-reduce captured inside the backward (several GPUs)
CONFIGS["step_graph_tuned_overlap"] = {
    **CONFIGS["step_graph_tuned"],
    "ddp": {"graph_overlap": True},
}

# Knobs added on top of a configuration (``FILE+NAME``): each of issue 23's knobs alone, the exact ones
# together (with the streamed or the compiled AdamW: they exclude each other), and the exact ones with fp8
# in one region (not exact: the parity check decides).
MODEL = {"model": {"skip_dead_work": True, "category_matmul": "grouped"}}
"""The ``model`` group's knobs on (both exact): no dead work, the projectors' grouped GEMM."""
EXACT = {**MODEL, "optimizer": {"streams": 2}}
ISSUE23 = {
    "model": {"bias_in_activation": True},
    "optimizer": {"impl": "master", "streams": 1, "overlap": True},
}
"""Session 8's knobs on: the vision MLP's bias in its GELU, master weights, the update beside the next prefix."""
VARIANTS: dict[str, dict] = {
    "model": MODEL,
    "skip_dead": {"model": {"skip_dead_work": True}},
    "grouped": {"model": {"category_matmul": "grouped"}},
    "streams2": {"optimizer": {"streams": 2}},
    "streams4": {"optimizer": {"streams": 4}},
    "compiled_adamw": {"optimizer": {"impl": "compiled"}},
    "master": {"optimizer": {"impl": "master", "streams": 1}},
    "bias_gelu": {"model": {"bias_in_activation": True}},
    "attended": {"model": {"attended_kv_only": True}},
    "gelu_epilogue": {"model": {"gelu_epilogue": True}},
    "attended_epilogue": {"model": {"attended_kv_only": True, "gelu_epilogue": True}},
    "fused_qkv": {"model": {"fused_frozen_qkv": True}},
    "fused_qkv_ws1": {
        "model": {"fused_frozen_qkv": True},
        "kernels": {"cublaslt_workspace_kib": 1},
    },
    "issue23": ISSUE23,
    # the same with the frozen vision tower's GEMMs in fp8 (not exact: the parity check decides)
    "issue23_fp8_vision": {**ISSUE23, "precision": {"regions": {"vision": "fp8"}}},
    "exact": EXACT,
    "exact_compiled": {**EXACT, "optimizer": {"impl": "compiled", "streams": 1}},
    **{
        f"exact_fp8_{region}": {**EXACT, "precision": {"regions": {region: "fp8"}}}
        for region in ("dit", "llm_trainable", "llm_frozen", "vision")
    },
}

BEST_1GPU = (
    Path(__file__).resolve().parents[2] / "reports" / "examples" / "full-1gpu-h200-v4" / "best.yaml"
)
"""The 1-GPU best so far (fourth campaign's study; 202 samples/s in the fifth campaign's suites):
the whole model compiled in a whole-step graph, fused AdamW, 14 workers x prefetch 4, device prefetch 2."""
BEST_V9 = BEST_1GPU.parents[1] / "full-1gpu-h200-v9" / "best.yaml"
"""The default ``run``'s confirmed best of 2026-12-02 (206.5 samples/s): that of ``best-1gpu`` with
the dead work skipped and the fused AdamW on 2 streams."""
BEST_V10 = BEST_1GPU.parents[1] / "full-1gpu-h200-v10" / "best.yaml"
"""The default space's run of 2026-12-02, session 8 (214.8 samples/s confirmed): ``best-v9`` with the
vision MLP's bias added in its GELU (``model.bias_in_activation``)."""
BEST_V11 = BEST_1GPU.parents[1] / "full-1gpu-h200-v11" / "best.yaml"
"""The default run of 2026-12-02, session 9 (210.3 samples/s confirmed, bound by that machine's loader; 70.2
ms a step on the GPU): ``best-v10`` with the master AdamW (and the loader's spawn start)."""
BEST_V12 = BEST_1GPU.parents[1] / "full-1gpu-h200-v12" / "best.yaml"
"""The default run of 2026-12-02, session 10 (232.7 samples/s confirmed, 238.6 in its study; 67.1 ms a step):
``best-v11`` with the cross-attention's keys and values for the attended tokens only and the frozen vision
MLP's GELU in its GEMM's epilogue."""
BEST_V13 = BEST_1GPU.parents[1] / "full-1gpu-h200-v13" / "best.yaml"
"""The default run of 2026-12-02, session 11 (241.3 samples/s confirmed, 240.8 in its study; 66.4 ms a step):
``best-v12``'s configuration with a 1-KiB cuBLASLt workspace, which changed no kernel of the step."""
ALIASES = {
    "best-1gpu": BEST_1GPU,
    "best-v9": BEST_V9,
    "best-v10": BEST_V10,
    "best-v11": BEST_V11,
    "best-v12": BEST_V12,
    "best-v13": BEST_V13,
}

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
    variant: dict[str, Any] | None = None
    """The :data:`VARIANTS` overrides applied on top of the file (``FILE+NAME``)."""
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
        if self.variant is not None:
            out["variant"] = self.variant
        return out


def builtin(name: str, settings: SuiteSettings) -> Entry:
    over = copy.deepcopy(CONFIGS[name])
    data = over.setdefault("data", {})
    data.setdefault("source", settings.source)
    data.setdefault("video_backend", settings.video_backend)
    cfg = config_from_dict(
        {
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


def with_variant(entry: Entry, variant: str) -> Entry:
    """The entry with :data:`VARIANTS` ``[variant]`` applied on top (validated like a loaded file)."""
    if variant not in VARIANTS:
        raise ConfigError(
            f"--configs: variant {variant!r} of {entry.name!r} is unknown; allowed: {sorted(VARIANTS)}"
        )
    cfg = config_from_dict(merge(to_dict(entry.config), VARIANTS[variant]))
    overrides = (
        merge(entry.overrides or {}, VARIANTS[variant]) if entry.overrides is not None else None
    )
    return Entry(
        f"{entry.name}+{variant}",
        cfg,
        entry.source,
        overrides=overrides,
        provenance=entry.provenance,
        adjusted=dict(entry.adjusted),
        variant=VARIANTS[variant],
    )


def _entry(text: str, settings: SuiteSettings) -> Entry:
    base, _, variant = text.partition("+")
    path = ALIASES.get(base, Path(base))
    if base in CONFIGS:
        entry = builtin(base, settings)
    elif base in ALIASES or base.endswith(YAML_SUFFIXES) or path.exists():
        entry = from_file(path, settings)
    else:
        raise ConfigError(
            f"--configs: {text!r} is neither a configuration name {sorted(CONFIGS)}, "
            f"an alias {sorted(ALIASES)} nor a configuration file (*.yaml)"
        )
    return with_variant(entry, variant) if variant else entry


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
