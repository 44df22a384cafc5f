"""What a study leaves in its run folder besides the study and the profiles.

``run.json`` (how the study was started, so that ``autotune report`` can find it), ``best.yaml``
(the winner, with its provenance), ``parity.json`` (loss parity of the winner against the stock
trial: both trials train from the same seed on the same batches, so their losses are compared
with :func:`autotune.train.verify.compare` at the winner's tolerance) and ``trials.csv``.
"""

from __future__ import annotations

import datetime
import json
from collections import Counter
from pathlib import Path
from typing import Any

import optuna

from autotune.config import SCHEMA_VERSION, load_config, save_config
from autotune.config.io import write_text_atomic
from autotune.errors import AutotuneError, TrialError
from autotune.search.study import StudyOptions, config_of
from autotune.search.trials import (
    RECORD,
    best_trial,
    feasible,
    measured,
    measurement_of,
    record_of,
    stock_trial,
)
from autotune.search.urls import redact


def write_run_info(opts: StudyOptions, *, finished: bool) -> Path:
    """``run.json``: the study's name, storage and options (started_at kept from the first write)."""
    path = opts.out / "run.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    info = {
        "study_name": opts.study_name, "storage": redact(opts.storage) if opts.storage else None, "workload": opts.base.workload,
        "preset": opts.base.preset, "space": opts.space.name, "nproc": opts.nproc, "trials": opts.trials,
        "steps": opts.steps, "warmup": opts.warmup, "batch_size": opts.base.batch_size,
        "memory_budget_bytes": opts.memory_budget, "sampler": opts.sampler, "seed": opts.seed,
        "guidance": opts.guidance, "stage_trials": opts.stage_trials, "prune": opts.prune,
        "started_at": old.get("started_at", now) if not finished or old else now,
        "finished_at": now if finished else None,
    }
    opts.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(info, indent=1))
    return path


def write_parity(opts: StudyOptions, study: optuna.Study) -> dict[str, Any] | None:
    """Loss parity of the best trial against the stock trial, from the losses both recorded."""
    from autotune.train.verify import compare, tolerance_for

    best, stock = best_trial(study), stock_trial(study)
    best_m = measurement_of(best) if best is not None else None
    stock_m = measurement_of(stock) if stock is not None else None
    if best_m is None or stock_m is None or not best_m.losses or not stock_m.losses:
        return None
    result = compare(stock_m, best_m, tolerance_for(config_of(opts, best))).to_dict()
    result.update({"stock_trial": stock.number, "trial": best.number})
    write_text_atomic(opts.out / "parity.json", json.dumps(result, indent=1))
    return result


def trials_to_fraction(study: optuna.Study, fraction: float = 0.95) -> int | None:
    """How many trials (counting from the first) the study took to reach ``fraction`` of its best."""
    best = best_trial(study)
    if best is None:
        return None
    for i, t in enumerate(study.get_trials(deepcopy=False)):
        if feasible(t) and t.value >= fraction * best.value:
            return i + 1
    return None


def provenance(opts: StudyOptions, study: optuna.Study, best: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """Plain data describing how ``best`` was found and measured."""
    stock = stock_trial(study)
    stock_speed = stock.value if stock is not None and feasible(stock) else None
    a = measurement_of(best)
    assert a is not None, "the best trial is measured"
    return {
        "tool": "autotune run",
        "study": opts.study_name,
        "space": opts.space.name,
        "trial": best.number,
        "trials": len(study.trials),
        "samples_per_s": a.samples_per_s,
        "stock_samples_per_s": stock_speed,
        "speedup_vs_stock": (a.samples_per_s / stock_speed) if stock_speed else None,
        "step_time_ms": a.step_time.median_ms,
        "peak_memory_bytes": a.memory.allocated_bytes,
        "memory_budget_bytes": opts.memory_budget,
        "mfu": a.mfu,
        "world_size": a.world_size,
        "steps": opts.steps,
        "warmup": opts.warmup,
        "trials_to_95_percent": trials_to_fraction(study, 0.95),
        "pruned": sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials),
        "failed": sum(t.state == optuna.trial.TrialState.FAIL for t in study.trials),
        "environment": dict(a.environment),
        "schema_version": SCHEMA_VERSION,
    }


def write_best(opts: StudyOptions, study: optuna.Study, parity: dict[str, Any] | None = None) -> Path:
    """Write the winning configuration to ``out/best.yaml``; no feasible trial is an error."""
    best = best_trial(study)
    if best is None:
        raise TrialError(f"no trial of study {opts.study_name!r} {why_no_best(study, opts.memory_budget)}; see "
                         f"{opts.out / 'report.html'}, {opts.out / 'trials.csv'} and {opts.out / 'logs'}", "infeasible")
    cfg = config_of(opts, best)
    cfg.provenance = provenance(opts, study, best)
    if parity is not None:
        cfg.provenance["parity"] = {k: parity[k] for k in ("passed", "tolerance", "loss_rel_diff", "grad_norm_rel_diff", "steps")}
    path = opts.out / "best.yaml"
    save_config(cfg, path)
    return path


def why_no_best(study: optuna.Study, budget: int) -> str:
    """What the study's trials did instead of giving a best: over the memory budget, or the
    commonest failure (with its first error)."""
    done = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    ran = [m for t in done if measured(t) and (m := measurement_of(t)) is not None]
    if ran:
        low = min(m.memory.allocated_bytes for m in ran)
        return (f"ran within the memory budget ({len(ran)} measured, the smallest peak {low / 2**30:.2f} GiB against "
                f"--memory-budget {budget / 2**30:.2f} GiB)")
    if not done:
        return "has finished (the study holds none)"
    failures = [f for t in done if (r := record_of(t)) is not None and (f := r.failure) is not None]
    if not failures:
        return f"gave a measurement ({len(done)} finished without one)"
    reason, count = Counter(f.reason for f in failures).most_common(1)[0]
    error = next(f.error for f in failures if f.reason == reason).strip().splitlines()
    return (f"gave a measurement: all {len(done)} failed, {count} of them with reason {reason!r}"
            + (f" ({error[0][:200]})" if error else ""))


def best_is_current(opts: StudyOptions, study: optuna.Study) -> bool:
    """True when ``best.yaml`` is of the study's best trial and the study has no trial since it was written."""
    path, best = opts.out / "best.yaml", best_trial(study)
    if best is None or not path.is_file():
        return False
    try:
        prov = load_config(path).provenance
    except AutotuneError:  # unreadable: write it anew
        return False
    return (prov.get("study"), prov.get("trial"), prov.get("trials")) == (opts.study_name, best.number, len(study.trials))


def write_trials(opts: StudyOptions, study: optuna.Study) -> Path:
    """``trials.csv``: Optuna's table of the trials, with the record's main numbers as columns."""
    import pandas

    frame = study.trials_dataframe().drop(columns=[f"user_attrs_{RECORD}"], errors="ignore")
    columns = pandas.DataFrame([record_columns(t) for t in study.trials], index=frame.index)
    path = opts.out / "trials.csv"
    write_text_atomic(path, pandas.concat([frame, columns], axis=1).to_csv(index=False))
    return path


def record_columns(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """The columns of ``trials.csv`` from the trial's record (empty where it has none)."""
    record = record_of(trial)
    m = record.measurement if record is not None else None
    profile = record.profile if record is not None else None
    failure = record.failure if record is not None else None
    return {
        "samples_per_s": m.samples_per_s if m else None,
        "window_samples_per_s": m.loader.window_samples_per_s if m else None,
        "loader_bound": m.loader.bound if m else None,
        "step_time_ms": m.step_time.median_ms if m else None,
        "step_time_p10_ms": m.step_time.p10_ms if m else None,
        "step_time_p90_ms": m.step_time.p90_ms if m else None,
        "peak_memory_bytes": m.memory.allocated_bytes if m else None,
        "mfu": m.mfu if m else None,
        "dominant": profile.dominant if profile else None,
        "buckets": json.dumps(profile.buckets) if profile and profile.buckets else None,
        "profile_overhead": profile.overhead if profile else None,
        "reason": failure.reason if failure else None,
        "error": failure.error if failure else None,
    }
