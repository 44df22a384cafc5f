"""One trial of a study, Optuna's objective: sample, check, measure, vet, and tell how it ended.

A trial samples the space's knobs, applies them to the base (stock) configuration, refuses
impossible combinations with ``check_compatible`` and runs the rest through
:func:`autotune.train.trial.launch.launch` (own process group, own temporary folder, hard timeout).
The objective is the measured samples/s, maximised; peak memory is a constraint against the
memory budget (``user_attrs["constraint"]`` = (peak - budget) / budget, feasible when <= 0),
handed to the sampler with ``trial.set_constraint("memory", ...)`` (Optuna 5's replacement of
``constraints_func``; TPE and GP use it, and the winner is chosen among feasible trials in
:mod:`autotune.search.trials`). Each trial keeps the run's
:class:`~autotune.train.trial.record.TrialRecord` (:func:`autotune.search.trials.store`); a failure is a
record too, with its reason and error.

How a trial ends:

* measured: COMPLETE with its samples/s (over the budget: COMPLETE but infeasible);
* out of memory: COMPLETE with value 0 and constraint 1, so the sampler learns that the region
  is infeasible (a FAIL trial would teach it nothing); the record's reason is ``oom``;
* refused configuration, crash, timeout, NaN loss, compile error, killed by a signal: FAIL with
  the reason and the error in its record; the study goes on;
* stopped by the time budget, by a signal to the tuner, or lost with its worker or with the warm
  parent (zygote) that forked it: FAIL with reason
  ``budget`` or ``interrupted``, queued again and not counted toward ``--trials``
  (:mod:`autotune.search.recovery`).

* clearly worse: PRUNED. Each measured step's time reaches the study while the trial runs
  (``launch(on_step=...)``) as an intermediate value (samples/s of that step); Optuna's
  ``WilcoxonPruner`` stops the trial when its steps are significantly slower than the best
  trial's same steps (one-sided signed-rank test, p < ``PRUNE_P``);
* a configuration measured already (the sampler drew it again): FAIL with reason ``duplicate``,
  not run;
* under ``--memory-budget``/``--gpu``, a search trial whose peak is predicted over the budget
  (:mod:`autotune.search.predict`): not run, COMPLETE with value 0 and its predicted excess as the
  constraint, as out of memory; the record's reason is ``predicted_oom``. Every trial with a
  prediction keeps it (``user_attrs["predicted_peak"]``), and ``diagnosis.json`` pairs it with the
  measured peak.

A measured search trial is vetted before it may lead (:mod:`autotune.search.vet`): loss parity
with stock's losses (where stock ran out of memory under an emulated budget, of stock run once more
without the cap: ``UNCAPPED`` on the stock trial; where the card cannot hold stock, of the first
exact configuration that fits), and a second run where its measurement was noisy; its value is then the
lower of its two runs. Its record keeps the host's load at its start and where its wall time went
(``record.cost``, the second run and the tuner's own work included), and every run of the study
shares one compile cache in the run folder (:mod:`autotune.train.compile_cache`).

After its measured steps, a trial that may become the incumbent (stock, references, and any
trial at least as fast as the best so far) profiles ``profile_steps`` more steps into
``profiles/trial-NNNN`` of the run folder; the classification (buckets, dominant bucket, profiling
overhead) goes into the trial's record, and :mod:`autotune.search.guide` uses the
incumbent's to choose the knob group to search next.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.config import TrainConfig
from autotune.config.compat import Machine, check_compatible
from autotune.errors import ConfigError
from autotune.redact import hide_secrets
from autotune.search.noise import trusted_value
from autotune.search.options import StudyOptions, cap_of, run_env
from autotune.search.params import sample, trial_config
from autotune.search.skip import not_run
from autotune.search.trials import BUDGET, REFERENCE, STOCK, UNCAPPED, WORKER, best_trial, store
from autotune.search.vet import (
    needs_second_run,
    needs_uncapped,
    parity_with_stock,
    settled,
    uncapped_run,
)
from autotune.train.memcap import BUDGET_ENV
from autotune.train.trial.launch import launch
from autotune.train.trial.record import TrialRecord
from autotune.train.window.cost import with_wall


def run_trial(
    trial: optuna.Trial,
    opts: StudyOptions,
    machine: Machine,
    regions: tuple[str, ...],
    timeout: float | None = None,
    queued: bool = False,
) -> tuple[TrialState, float | None]:
    """Sample, check, measure and vet one trial; its state and value for ``study.tell``. ``timeout``
    shorter than ``opts.timeout_per_trial`` is the end of the time budget: a trial it stops fails
    with ``reason: budget``, not ``timeout`` (the configuration did not hang). ``queued``: the trial
    was enqueued (its parameters chosen for it): it runs even where a trial had them already."""
    began = time.monotonic()
    limit = opts.timeout_per_trial if timeout is None else min(timeout, opts.timeout_per_trial)
    trial.set_user_attr(WORKER, f"{socket.gethostname()}:{os.getpid()}")
    try:
        cfg = trial_config(opts.base, sample(trial, opts.space))
        check_compatible(cfg, machine, regions)
    except ConfigError as exc:
        store(trial, TrialRecord.failed("config", str(exc)))
        return TrialState.FAIL, None
    search = not (trial.user_attrs.get(STOCK) or trial.user_attrs.get(REFERENCE))
    told = not_run(trial, cfg, opts, timeout, search=search, queued=queued)
    if told is not None:
        return told
    record, profile_dir = measure(trial, cfg, opts, limit, search=search)
    left = limit - (time.monotonic() - began)
    if trial.user_attrs.get(STOCK) and needs_uncapped(record, cap_of(opts), machine) and left > 0:
        # stock's losses, the reference of loss parity: the budget is emulated below the device's
        # memory, which may hold stock (autotune.search.vet)
        uncapped = uncapped_run(
            cfg,
            steps=opts.steps,
            warmup=opts.warmup,
            nproc=opts.nproc,
            timeout=left,
            log_path=opts.out / "logs" / f"trial-{trial.number:04d}-uncapped.log",
            env={**run_env(opts), BUDGET_ENV: ""},
        )
        trial.set_user_attr(UNCAPPED, uncapped)
    parity, noisy = None, False
    if search and record.measurement is not None:
        record, parity, noisy = vet_trial(
            trial, record, cfg, opts, limit - (time.monotonic() - began)
        )
    remeasure = record.remeasure.cost if record.remeasure is not None else None
    record = replace(record, cost=with_wall(record.cost, time.monotonic() - began, remeasure))
    return tell_record(
        trial,
        record,
        opts,
        profile_dir,
        budget_s=limit if limit < opts.timeout_per_trial else None,
        parity=parity,
        noisy=noisy,
    )


def measure(
    trial: optuna.Trial, cfg: TrainConfig, opts: StudyOptions, limit: float, *, search: bool
) -> tuple[TrialRecord, Path]:
    """The trial's run, each step's rate reported for pruning, profiled after its measured steps
    where it may lead; its record and the folder of its profile."""
    log = opts.out / "logs" / f"trial-{trial.number:04d}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    profile_dir = opts.out / "profiles" / f"trial-{trial.number:04d}"
    per_step = cfg.batch_size * opts.nproc
    best = best_trial(trial.study) if search else None

    def on_step(step: int, seconds: float) -> bool:
        trial.report(per_step / seconds, step)
        return (
            step < opts.steps - 1 and trial.should_prune()
        )  # the last step: the measurement is complete

    record = launch(
        cfg,
        steps=opts.steps,
        warmup=opts.warmup,
        nproc=opts.nproc,
        timeout=limit,
        log_path=log,
        on_step=on_step,
        profile_after=profile_dir if opts.profile_steps else None,
        profile_steps=opts.profile_steps,
        profile_if_above=float(best.value) if best else None,
        extra_env=run_env(opts),
    )
    keep_traceback(log, record)
    return record, profile_dir


def keep_traceback(log: Path, record: TrialRecord) -> None:
    """Append a failed run's traceback to its log: the worker keeps it in the record alone, and the
    line of a failed stock trial sends the user to the log (``baseline.stock_failure``)."""
    failure = record.failure
    if failure is None or not failure.traceback:
        return
    try:
        with open(log, "a", encoding="utf-8", errors="backslashreplace") as f:  # lone surrogates
            f.write(f"\n{hide_secrets(failure.traceback).rstrip()}\n")
    except OSError:  # a full disk: the journal's record still holds it
        pass


def vet_trial(
    trial: optuna.Trial, record: TrialRecord, cfg: TrainConfig, opts: StudyOptions, time_left: float
) -> tuple[TrialRecord, dict[str, Any] | None, bool]:
    """The trial's record with a second run where it was noisy and would lead, its parity with stock,
    and whether it stays noisy (see :mod:`autotune.search.vet`)."""
    study = trial.study
    parity = parity_with_stock(study, record, cfg)
    if needs_second_run(study, record) and (parity is None or parity["passed"]) and time_left > 0:
        log = opts.out / "logs" / f"trial-{trial.number:04d}-again.log"
        again = launch(
            cfg,
            steps=opts.steps,
            warmup=opts.warmup,
            nproc=opts.nproc,
            timeout=time_left,
            log_path=log,
            extra_env=run_env(opts),
        )
        record = replace(record, remeasure=again)
    return record, parity, not settled(record)


def tell_record(
    trial: optuna.Trial,
    record: TrialRecord,
    opts: StudyOptions,
    profile_dir: Path,
    *,
    budget_s: float | None = None,
    parity: dict[str, Any] | None = None,
    noisy: bool = False,
) -> tuple[TrialState, float | None]:
    """Store the run's record in the trial; the trial's state and value (see the module docstring).
    ``budget_s``: the run's timeout was the time left of ``--time-budget``: a timeout is then ``budget``."""
    failure = record.failure
    if failure is None:
        assert record.measurement is not None, "a run without a failure has a measurement"
        measured = record.measurement
        constraint = (measured.memory.allocated_bytes - opts.memory_budget) / opts.memory_budget
        profiled = record.profile is not None and record.profile.buckets is not None
        store(
            trial,
            record,
            constraint=constraint,
            profile_dir=str(profile_dir.relative_to(opts.out)) if profiled else None,
            parity=parity,
            noisy=noisy,
        )
        return TrialState.COMPLETE, trusted_value(record)
    if failure.reason == "pruned":
        store(trial, record)
        shutil.rmtree(profile_dir, ignore_errors=True)
        return TrialState.PRUNED, None
    if failure.reason == "oom":
        peak = failure.peak_bytes
        over = (peak - opts.memory_budget) / opts.memory_budget if peak else 0.0
        store(trial, record, constraint=max(over, 1e-3) if peak else 1.0)
        return TrialState.COMPLETE, 0.0
    if failure.reason == "timeout" and budget_s is not None:
        stopped = TrialRecord.failed(
            BUDGET, f"stopped at the end of the time budget after {budget_s:.0f} s"
        )
        record = replace(
            stopped, cost=record.cost
        )  # what it spent: at least its cost (expected.py)
    store(trial, record)
    return TrialState.FAIL, None
