"""What a study leaves in its run folder: ``best.yaml`` and ``trials.csv``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna

from autotune.config import SCHEMA_VERSION, save_config
from autotune.config.io import write_text_atomic
from autotune.errors import TrialError
from autotune.search.study import StudyOptions, best_trial, config_of, feasible, stock_trial


def provenance(opts: StudyOptions, study: optuna.Study, best: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """Plain data describing how ``best`` was found and measured."""
    stock = stock_trial(study)
    stock_speed = stock.value if stock is not None and feasible(stock) else None
    a = best.user_attrs
    return {
        "tool": "autotune run",
        "study": opts.study_name,
        "space": opts.space.name,
        "trial": best.number,
        "trials": len(study.trials),
        "samples_per_s": a["samples_per_s"],
        "stock_samples_per_s": stock_speed,
        "speedup_vs_stock": (a["samples_per_s"] / stock_speed) if stock_speed else None,
        "step_time_ms": a["step_time_ms"],
        "peak_memory_bytes": a["peak_memory_bytes"],
        "memory_budget_bytes": opts.memory_budget,
        "mfu": a.get("mfu"),
        "world_size": a.get("world_size", opts.nproc),
        "steps": opts.steps,
        "warmup": opts.warmup,
        "environment": json.loads(a.get("environment", "{}")),
        "schema_version": SCHEMA_VERSION,
    }


def write_best(opts: StudyOptions, study: optuna.Study) -> Path:
    """Write the winning configuration to ``out/best.yaml``; no feasible trial is an error."""
    best = best_trial(study)
    if best is None:
        raise TrialError(f"no trial of study {opts.study_name!r} ran within the memory budget; "
                         f"see {opts.out / 'trials.csv'} and {opts.out / 'logs'}", "infeasible")
    cfg = config_of(opts, best)
    cfg.provenance = provenance(opts, study, best)
    path = opts.out / "best.yaml"
    save_config(cfg, path)
    return path


def write_trials(opts: StudyOptions, study: optuna.Study) -> Path:
    path = opts.out / "trials.csv"
    write_text_atomic(path, study.trials_dataframe().to_csv(index=False))
    return path
