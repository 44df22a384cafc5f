"""What a study leaves in its run folder besides the study and the profiles.

``run.json`` (how the study was started, so that ``autotune report`` can find it), ``best.yaml``
(the winner, with its provenance: the confirmed numbers where the winner was measured again,
``autotune.search.confirm``), ``parity.json`` (loss parity of the winner against the stock
trial, or where stock did not fit, the study's parity reference named in it,
:func:`autotune.search.vet.parity_reference`: both train from the same seed on the same batches, so
their losses are compared with :func:`autotune.train.window.verify.compare` at the winner's
tolerance) and ``trials.csv`` (every
trial with its record's numbers: the step-time spread, the host's load at its start, where its
wall time went).
"""

from __future__ import annotations

import datetime
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import optuna

from autotune.boundedread import read_text
from autotune.config import SCHEMA_VERSION, load_config, save_config
from autotune.config.io import write_text_atomic
from autotune.errors import AutotuneError, ConfigError, TrialError
from autotune.redact import StorageURL
from autotune.search.confirm import Confirmation, check_confirmation
from autotune.search.converge import Convergence
from autotune.search.noise import flags
from autotune.search.options import StudyOptions
from autotune.search.params import config_of
from autotune.search.trials import (
    DUPLICATE,
    NOISY,
    PARITY,
    PREDICTED_OOM,
    RECORD,
    best_trial,
    feasible,
    measured,
    measurement_of,
    parity_passed,
    parity_pending,
    parity_undecided,
    record_of,
    stock_trial,
)
from autotune.search.vet import parity_reference
from autotune.train.window.cost import PARTS
from autotune.workloads.registry import absolute_spec


def write_run_info(opts: StudyOptions, *, finished: bool) -> Path:
    """``run.json``: the study's name, storage and options (started_at kept from the first write)."""
    path = opts.out / "run.json"
    old = json.loads(read_text(path, error=ConfigError)) if path.exists() else {}
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    info = {
        "study_name": opts.study_name,
        "storage": str(StorageURL.of(opts.storage)) if opts.storage else None,  # redacted
        "workload": opts.base.workload,
        "preset": opts.base.preset,
        "space": opts.space.name,
        "nproc": opts.nproc,
        "trials": opts.trials,
        "steps": opts.steps,
        "warmup": opts.warmup,
        "batch_size": opts.base.batch_size,
        "data": opts.data if opts.data is not None else old.get("data"),
        "memory_budget_bytes": opts.memory_budget,
        "sampler": opts.sampler,
        "seed": opts.seed,
        "guidance": opts.guidance,
        "stage_trials": opts.stage_trials,
        "prune": opts.prune,
        "confirm_rounds": opts.confirm_rounds,
        "converge_after": opts.converge_after,
        "started_at": old.get("started_at", now) if not finished or old else now,
        "finished_at": now if finished else None,
    }
    opts.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(info, indent=1))
    return path


def winner_of(
    study: optuna.Study, confirmation: Confirmation | None
) -> optuna.trial.FrozenTrial | None:
    """The trial ``best.yaml`` holds: the confirmed winner, else the study's best."""
    if confirmation is not None and confirmation.confirmed:
        return study.trials[confirmation.trial]
    return best_trial(study)


def write_parity(
    opts: StudyOptions, study: optuna.Study, confirmation: Confirmation | None = None
) -> dict[str, Any] | None:
    """Loss parity of the winner against the study's reference (stock's losses, or where stock
    did not fit, :func:`autotune.search.vet.parity_reference`), from the losses both recorded."""
    from autotune.train.window.verify import compare, tolerance_for

    best, ref = winner_of(study, confirmation), parity_reference(study)
    best_m = measurement_of(best) if best is not None else None
    if best_m is None or ref is None or not best_m.losses:
        return None
    result = compare(ref, best_m, tolerance_for(config_of(opts, best))).to_dict()
    result.update({"trial": best.number, "reference": ref.to_dict()})
    if ref.kind != "exact":
        result["stock_trial"] = ref.trial
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


def provenance(
    opts: StudyOptions,
    study: optuna.Study,
    best: optuna.trial.FrozenTrial,
    confirmation: Confirmation | None = None,
    converged: Convergence | None = None,
) -> dict[str, Any]:
    """Plain data describing how ``best`` was found and measured: with a confirmation, its samples/s,
    stock's and the speed-up are the confirmed ones (the study's own beside them)."""
    stock = stock_trial(study)
    stock_speed = stock.value if stock is not None and feasible(stock) else None
    a = measurement_of(best)
    assert a is not None, "the best trial is measured"
    speed = float(best.value) if best.value is not None else a.samples_per_s
    confirmed = confirmation is not None and confirmation.confirmed
    return {
        "tool": "autotune run",
        "study": opts.study_name,
        "space": opts.space.name,
        "trial": best.number,
        "stock_trial": stock.number if stock is not None else None,
        "study_best_trial": found.number if (found := best_trial(study)) is not None else None,
        "trials": len(study.trials),
        "samples_per_s": confirmation.samples_per_s if confirmed else speed,
        "stock_samples_per_s": confirmation.stock_samples_per_s if confirmed else stock_speed,
        "speedup_vs_stock": confirmation.speedup
        if confirmed
        else ((speed / stock_speed) if stock_speed else None),
        "confirmed": confirmed,
        "study_samples_per_s": speed,
        "study_stock_samples_per_s": stock_speed,
        # what the study's own trials said of its best, also where the confirmation kept stock
        "study_speedup_vs_stock": confirmation.study_speedup
        if confirmation is not None
        else ((speed / stock_speed) if stock_speed else None),
        "step_time_spread": a.step_time.spread,
        "confirmation": confirmation.to_dict() if confirmation is not None else None,
        "converged": converged.reason if converged is not None else None,
        "step_time_ms": a.step_time.median_ms,
        "peak_memory_bytes": a.memory.allocated_bytes,
        "memory_budget_bytes": opts.memory_budget,
        "mfu": a.mfu,
        # the same counting only the FLOPs that reach the loss or a gradient (no dead work)
        "useful_mfu": a.useful_mfu,
        "world_size": a.world_size,
        "steps": opts.steps,
        "warmup": opts.warmup,
        "trials_to_95_percent": trials_to_fraction(study, 0.95),
        "pruned": sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials),
        "failed": sum(t.state == optuna.trial.TrialState.FAIL for t in study.trials),
        "environment": dict(a.environment),
        "schema_version": SCHEMA_VERSION,
    }


def write_best(
    opts: StudyOptions,
    study: optuna.Study,
    parity: dict[str, Any] | None = None,
    confirmation: Confirmation | None = None,
    converged: Convergence | None = None,
) -> Path:
    """Write the winning configuration to ``out/best.yaml``; no feasible trial is an error."""
    best = winner_of(study, confirmation)
    if best is None:
        raise TrialError(
            f"no trial of study {opts.study_name!r} {why_no_best(study, opts.memory_budget)}; see "
            f"{opts.out / 'report.html'}, {opts.out / 'trials.csv'} and {opts.out / 'logs'}",
            "infeasible",
        )
    cfg = config_of(opts, best)
    cfg.workload = absolute_spec(cfg.workload)  # best.yaml is used from other folders
    cfg.provenance = provenance(opts, study, best, confirmation, converged)
    if parity is not None:
        cfg.provenance["parity"] = {
            k: parity[k]
            for k in ("passed", "tolerance", "loss_rel_diff", "grad_norm_rel_diff", "steps")
        }
        cfg.provenance["parity"]["reference"] = parity["reference"]["text"]
    path = opts.out / "best.yaml"
    save_config(cfg, path)
    return path


def why_no_best(study: optuna.Study, budget: int) -> str:
    """What the study's trials did instead of giving a best: over the memory budget, or the
    commonest failure (with its first error)."""
    done = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    ran = [m for t in done if measured(t) and (m := measurement_of(t)) is not None]
    pending = [t.number for t in done if parity_pending(t)]
    if pending:
        return (
            f"may be the best: trials {pending} fit but change what is computed, and no loss-parity "
            "reference exists (stock did not fit, and no configuration that computes what stock "
            "does fitted): raise --memory-budget, or give the space an exact remedy (optimizer.offload)"
        )
    unlike = [t.number for t in done if (t.user_attrs.get(PARITY) or {}).get("passed") is False]
    if unlike:
        return (
            f"kept loss parity: trials {unlike} ran but their losses or gradient norms differ from "
            "the reference's by more than the tolerance (parity in report.html and trials.csv)"
        )
    undecided = [t.number for t in done if parity_undecided(t)]
    if undecided:
        return (
            f"passed loss parity on enough steps: trials {undecided} ran, but their windows were too "
            "few steps to tell their losses from the reference's noise (parity in report.html); run "
            "with more --steps"
        )
    if ran:
        low = min(m.memory.allocated_bytes for m in ran)
        return (
            f"ran within the memory budget ({len(ran)} measured, the smallest peak {low / 2**30:.2f} GiB against "
            f"--memory-budget {budget / 2**30:.2f} GiB)"
        )
    if not done:
        return "has finished (the study holds none)"
    failures = [f for t in done if (r := record_of(t)) is not None and (f := r.failure) is not None]
    leanest = _leanest_out_of_memory(done, budget)
    if leanest is not None:
        return leanest
    if not failures:
        return f"gave a measurement ({len(done)} finished without one)"
    reason, count = Counter(f.reason for f in failures).most_common(1)[0]
    error = next(f.error for f in failures if f.reason == reason).strip().splitlines()
    return f"gave a measurement: all {len(done)} failed, {count} of them with reason {reason!r}" + (
        f" ({error[0][:200]})" if error else ""
    )


def _leanest_out_of_memory(done: list[optuna.trial.FrozenTrial], budget: int) -> str | None:
    """Where every trial that was not a repeat ran out of memory or was predicted to: how many of
    each, the least predicted need, and what to do."""
    failed = [(t.number, f) for t in done if (r := record_of(t)) and (f := r.failure) is not None]
    failed = [(n, f) for n, f in failed if f.reason != DUPLICATE]
    if not budget or not failed or any(f.reason not in ("oom", PREDICTED_OOM) for _, f in failed):
        return None
    predicted = [(f.peak_bytes, n) for n, f in failed if f.reason == PREDICTED_OOM and f.peak_bytes]
    least = ""
    if predicted:
        peak, number = min(predicted)
        least = f"; the least predicted need: at least {peak / 2**30:.2f} GiB (trial #{number})"
    return (
        f"fit the memory budget: {sum(f.reason == 'oom' for _, f in failed)} configuration(s) ran out "
        "of memory and "
        f"{len(predicted)} were predicted to need more than --memory-budget {budget / 2**30:.2f} "
        f"GiB{least}: raise the budget, or offer the memory stage leaner knobs (optimizer.offload, "
        "optimizer.impl: adamw4bit, checkpointing.regions)"
    )


def best_is_current(opts: StudyOptions, study: optuna.Study) -> bool:
    """True when ``best.yaml`` is of the study's best trial, the study has no trial since it was written,
    and it is confirmed where confirmation is asked for (a time budget that ended before the
    confirmation did, or a run with ``--confirm-rounds 0``, leaves one to finish)."""
    path, best = opts.out / "best.yaml", best_trial(study)
    if best is None or not path.is_file():
        return False
    try:
        prov = load_config(path).provenance
    except AutotuneError:  # unreadable: write it anew
        return False
    if _damaged(prov, study):  # what the run prints from it would fail: write it anew
        return False
    # a confirmation may have kept another trial (the runner-up, or stock) than the study's best
    found = prov.get("study_best_trial", prov.get("trial"))
    unconfirmed = (
        opts.confirm_rounds > 0
        and not prov.get("confirmed")
        and best.number != getattr(stock_trial(study), "number", None)
    )
    return (prov.get("study"), found, prov.get("trials")) == (
        opts.study_name,
        best.number,
        len(study.trials),
    ) and not unconfirmed


NUMBERS = ("samples_per_s", "stock_samples_per_s", "speedup_vs_stock", "step_time_ms")
"""best.yaml's provenance numbers that a run prints at its end."""


def _damaged(prov: dict[str, Any], study: optuna.Study) -> bool:
    """A provenance whose numbers are not numbers (an edit by hand), or whose confirmation is not of
    the shape :mod:`autotune.search.confirm` writes."""
    if any(
        prov.get(k) is not None
        and (type(prov[k]) not in (int, float) or not math.isfinite(prov[k]))
        for k in NUMBERS
    ):
        return True
    if prov.get("confirmation") is None:
        return False
    try:
        check_confirmation(prov["confirmation"], {t.number for t in study.trials})
    except ValueError:
        return True
    return False


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
    host = record.host if record is not None else None
    again = (
        record.remeasure.measurement
        if record is not None and record.remeasure is not None
        else None
    )
    spent = record.cost if record is not None else None
    columns = {
        "samples_per_s": m.samples_per_s if m else None,
        "window_samples_per_s": m.loader.window_samples_per_s if m else None,
        "loader_bound": m.loader.bound if m else None,
        "step_time_ms": m.step_time.median_ms if m else None,
        "step_time_p10_ms": m.step_time.p10_ms if m else None,
        "step_time_p90_ms": m.step_time.p90_ms if m else None,
        "peak_memory_bytes": m.memory.allocated_bytes if m else None,
        "mfu": m.mfu if m else None,
        "useful_mfu": m.useful_mfu if m else None,
        "dominant": profile.dominant if profile else None,
        "buckets": json.dumps(profile.buckets) if profile and profile.buckets else None,
        "profile_overhead": profile.overhead if profile else None,
        "reason": failure.reason if failure else None,
        "error": failure.error if failure else None,
        "step_time_spread": m.step_time.spread if m else None,
        "host_others_busy": host.others_busy if host else None,
        "host_load_average": host.load_average if host else None,
        "noise": "; ".join(flags(record)) or None if record is not None else None,
        "remeasured_samples_per_s": again.samples_per_s if again else None,
        "noisy": bool(trial.user_attrs.get(NOISY)),
        "parity_passed": parity_passed(trial),
        "cost_wall_s": spent.wall_s if spent else None,
    }
    for part in PARTS:
        columns[f"cost_{part}_s"] = spent.parts.get(part, 0.0) if spent else None
    return columns
