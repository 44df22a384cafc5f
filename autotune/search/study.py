"""One tuning study: Optuna's ask-and-tell loop over trials run in fresh processes.

Each trial samples the space's knobs, applies them to the base (stock) configuration, refuses
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
incumbent's to choose the knob group to search next. Traces are kept for the stock trial, the
incumbents the stages started from and the best trial; the other trials keep their
``classification.summary``. The study stops after ``trials`` trials, at the end of the time
budget (leaving the caller's ``reserve`` for confirming the winner), or when it has converged
(:mod:`autotune.search.converge`).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import optuna
from optuna.samplers import PartialFixedSampler
from optuna.trial import FrozenTrial, TrialState

from autotune.config import TrainConfig
from autotune.config.compat import Machine, check_compatible
from autotune.errors import ConfigError, TrialError
from autotune.redact import StorageURL
from autotune.search import settings
from autotune.search.baseline import queue_stock_again, stock_failure
from autotune.search.converge import FREE_TRIALS, Convergence, convergence, plateau
from autotune.search.expected import expected_of, too_costly
from autotune.search.guide import Guide, Stage
from autotune.search.noise import trusted_value
from autotune.search.predict import accuracy, predicted_of, too_large
from autotune.search.progress import progress_line
from autotune.search.recovery import (
    MAX_INTERRUPTIONS,
    counted,
    interruptible,
    interruptions,
    more_to_run,
    recover_lost,
    requeue,
)
from autotune.search.sampling import make_pruner, make_sampler
from autotune.search.space import SearchSpace, apply_values
from autotune.search.storage import GRACE_PERIOD, heartbeat, open_storage
from autotune.search.trials import (
    BUDGET,
    CONVERGED,
    COST,
    DUPLICATE,
    GROUP,
    PREDICTED,
    PREDICTED_OOM,
    QUEUED_AGAIN,
    RECHECK_OF,
    REFERENCE,
    STAGE,
    STOCK,
    UNCAPPED,
    WORKER,
    best_trial,
    reason_of,
    record_of,
    span_s,
    store,
)
from autotune.search.vet import (
    Reference,
    needs_second_run,
    needs_uncapped,
    parity_reference,
    parity_with_stock,
    rechecks,
    settled,
    uncapped_run,
)
from autotune.train.compile_cache import FOLDER as CACHE_FOLDER
from autotune.train.compile_cache import cache_env
from autotune.train.memcap import BUDGET_ENV
from autotune.train.trial.launch import launch
from autotune.train.trial.record import INTERRUPTED, TrialRecord
from autotune.train.window.cost import with_wall

SKIPS_IN_A_ROW = 3
"""Trials in a row not started for their cost after which a study under a time budget stops."""


@dataclass
class StudyOptions:
    """Everything one study needs; built by ``autotune.search.cli`` from the command line."""

    base: TrainConfig
    space: SearchSpace
    out: Path
    trials: int
    steps: int
    warmup: int
    nproc: int
    timeout_per_trial: float
    memory_budget: int
    memory_cap: bool = False
    """Every run of the study runs under ``memory_budget`` (:mod:`autotune.train.memcap`): capped on
    CUDA, its peak checked on a CPU; a run over it fails as out of memory. False: the budget is a
    constraint on the measured peak only."""
    sampler: str = "tpe"
    seed: int = 0
    storage: StorageURL | None = None
    """The study's database (None: the run folder's journal); it shows only redacted."""
    study_name: str = ""
    guidance: bool = True
    references: tuple[tuple[str, TrainConfig], ...] = ()
    """Configurations measured as trials of their own right after the stock one (``--reference``)."""
    stage_trials: int = 4
    prune: bool = True
    profile_steps: int = 3
    time_budget_s: float | None = None
    """This run's tuning time: no trial starts when the time left is shorter than a typical trial of
    the study (the median of those finished), and a trial still running at the end is stopped
    (``reason: budget``) and queued again, for the same command to measure when it continues the
    study. A run's first trial is never stopped: each run measures at least one."""
    grace_period_s: int = GRACE_PERIOD
    """With a database: a running trial whose heartbeat is older than this is failed and queued
    again by any worker (its worker died); heartbeats go every quarter of it."""
    confirm_rounds: int = 2
    """Rounds of stock and the best measured again at the end (``autotune.search.confirm``; 0: none)."""
    converge_after: int = FREE_TRIALS
    """Free trials that found nothing within noise of the best before the study stops (0: never)."""
    data: dict[str, Any] | None = None
    """Which data the study trains on (:class:`autotune.search.data_echo.DataEcho`), for run.json."""
    plateau: bool = False
    """Also stop on a plateau (:func:`autotune.search.converge.plateau`): for a study left to end by
    itself (no ``--trials``, no ``--time-budget``); off with ``converge_after`` 0."""


@dataclass
class StudyResult:
    """How :func:`run_study` ended."""

    study: optuna.Study
    converged: Convergence | None = None
    deadline: float | None = None
    """``time.monotonic()`` at the end of the time budget (None: no budget)."""
    stopped: str | None = None
    """Why the study stopped before its end (its stock trial cannot run: :mod:`autotune.search.baseline`)."""


def run_env(opts: StudyOptions) -> dict[str, str]:
    """The environment every run of the study gets beside the tuner's: the study's compile cache."""
    env = cache_env(opts.out / CACHE_FOLDER)
    if opts.memory_cap:
        env[BUDGET_ENV] = str(opts.memory_budget)
    return env


def cap_of(opts: StudyOptions) -> int | None:
    """The memory cap every run of the study runs under (None: none)."""
    return opts.memory_budget if opts.memory_cap else None


def open_study(opts: StudyOptions) -> optuna.Study:
    """Create the study with the stock configuration queued first, or load it to continue."""
    storage = open_storage(
        opts.storage,
        opts.out,
        heartbeat_interval=max(1, opts.grace_period_s // 4),
        grace_period=opts.grace_period_s,
    )
    kwargs: dict[str, Any] = dict(
        study_name=opts.study_name,
        storage=storage,
        sampler=make_sampler(opts.sampler, opts.seed),
        pruner=make_pruner(opts.prune),
    )
    try:  # of several workers starting at once, exactly one creates the study (its name is unique)
        study = optuna.create_study(direction="maximize", **kwargs)
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(**kwargs)
        settings.check_unchanged(study, opts)
        check_space_unchanged(study, opts.space)
        return study
    settings.record(study, opts)
    study.enqueue_trial(opts.space.stock_params(opts.base), user_attrs={STOCK: True})
    return study


def sample(trial: optuna.Trial, space: SearchSpace) -> dict[str, Any]:
    """Config values of the active knobs, sampled in order (a ``when`` sees the knobs before it)."""
    values: dict[str, Any] = {}
    for knob in space.knobs:
        if not knob.active(values):
            continue
        if knob.type == "int":
            param = trial.suggest_int(
                knob.key, int(knob.low), int(knob.high), step=int(knob.step or 1), log=knob.log
            )
        elif knob.type == "float":
            param = trial.suggest_float(knob.key, knob.low, knob.high, step=knob.step, log=knob.log)
        else:
            choices = [knob.encode(c) for c in knob.choices]
            try:
                param = trial.suggest_categorical(knob.key, choices)
            except (
                ValueError
            ) as exc:  # a queued value (enqueue_trial, a shared study) this machine's space lacks
                raise ConfigError(
                    f"{knob.key}: a queued value is not one of this machine's choices ({exc})"
                ) from None
        values[knob.key] = knob.decode(param)
    return values


def trial_config(base: TrainConfig, values: dict[str, Any]) -> TrainConfig:
    """``base`` with the knob values applied; per-region precisions equal to the default are left out."""
    cfg = apply_values(base, values)
    cfg.precision.regions = {
        r: p for r, p in cfg.precision.regions.items() if p != cfg.precision.default
    }
    return cfg


def config_of(opts: StudyOptions, trial: FrozenTrial) -> TrainConfig:
    """The configuration a finished trial ran (rebuilt from its parameters)."""
    return config_of_params(opts, trial.params)


def config_of_params(opts: StudyOptions, params: dict[str, Any]) -> TrainConfig:
    """The base configuration with Optuna parameters of the space applied."""
    by_key = {k.key: k for k in opts.space.knobs}
    values = {key: by_key[key].decode(p) if key in by_key else p for key, p in params.items()}
    return trial_config(opts.base, values)


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
    if timeout is not None:  # the budget's end is near: a trial that cannot finish is not started
        why = too_costly(
            expected_of(cfg, trial.study, lambda t: config_of(opts, t)),
            min(timeout, opts.timeout_per_trial),
        )
        if why is not None:
            store(trial, TrialRecord.failed(COST, why))
            return TrialState.FAIL, None
    search = not (trial.user_attrs.get(STOCK) or trial.user_attrs.get(REFERENCE))
    same = duplicate_of(trial) if search and not queued else None
    if (
        same is not None
    ):  # what it would measure is known: the sampler learns nothing from running it
        store(
            trial,
            TrialRecord.failed(
                DUPLICATE, f"the same configuration as trial #{same}, not run again"
            ),
        )
        return TrialState.FAIL, None
    if not trial.user_attrs.get(STOCK) and opts.memory_cap:
        skipped = predict_peak(trial, cfg, opts, may_skip=search)
        if skipped is not None:
            return skipped
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


def predict_peak(
    trial: optuna.Trial, cfg: TrainConfig, opts: StudyOptions, may_skip: bool
) -> tuple[TrialState, float] | None:
    """Keep the trial's predicted peak (:mod:`autotune.search.predict`) in its attributes; where it
    ``may_skip`` and the prediction is over the budget, the trial is not run: it is told as out of
    memory (value 0, its predicted excess the constraint), so the sampler learns the region."""
    try:
        pred = predicted_of(cfg, trial.study, lambda t: config_of(opts, t))
    except Exception:  # noqa: BLE001  advice only: a model the meta count cannot build runs unpredicted
        return None
    if pred is None:
        return None
    trial.set_user_attr(PREDICTED, pred.to_dict())
    why = too_large(pred, opts.memory_budget) if may_skip else None
    if why is None:
        return None
    budget = opts.memory_budget
    record = TrialRecord.failed(PREDICTED_OOM, why, peak_bytes=pred.peak_bytes, budget_bytes=budget)
    store(trial, record, constraint=max((pred.peak_bytes - budget) / budget, 1e-3))
    return TrialState.COMPLETE, 0.0


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


def duplicate_of(trial: optuna.Trial) -> int | None:
    """The number of a trial that ran (measured or pruned) with exactly this trial's parameters."""
    params = trial.params
    for t in trial.study.get_trials(
        deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)
    ):
        if t.number != trial.number and t.params == params and reason_of(t) != BUDGET:
            return t.number
    return None


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


def keep_traces(study: optuna.Study, guide: Guide, out: Path) -> None:
    """Delete the traces of trials that are neither stock, a stage's incumbent, nor the best."""
    keep = {t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get(STOCK)}
    keep |= {s.incumbent for s in guide.stages}
    best = best_trial(study)
    if best is not None:
        keep.add(best.number)
    for folder in (out / "profiles").glob("trial-*"):
        number = int(folder.name.split("-")[1]) if folder.name.split("-")[1].isdigit() else -1
        if number in keep:
            continue
        for trace in folder.glob("*.json*"):
            trace.unlink(missing_ok=True)


def run_study(
    opts: StudyOptions,
    machine: Machine,
    regions: tuple[str, ...],
    report: Callable[[str], None] = print,
    reserve: Callable[[optuna.Study], float] | None = None,
    study: optuna.Study | None = None,
) -> StudyResult:
    """Run trials until the study holds ``opts.trials`` finished ones (all workers together; those
    queued again do not count), the time budget ends (less ``reserve(study)`` seconds kept for what
    the caller does next), or it converges. ``study``: the study already opened (:func:`open_study`)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = study or open_study(opts)
    own_folder = opts.storage is None  # the run folder's journal, whose lock the caller holds
    for line in recover_lost(study, own_folder=own_folder, grace_period_s=opts.grace_period_s):
        report(line)
    have = {t.user_attrs.get(REFERENCE) for t in study.get_trials(deepcopy=False)}
    for name, cfg in opts.references:
        if name not in have:
            study.enqueue_trial(opts.space.stock_params(cfg), user_attrs={REFERENCE: name})
    guide = Guide(
        opts.space,
        opts.stage_trials,
        enabled=opts.guidance,
        stock=opts.base,
        memory_budget=opts.memory_budget,
    )
    guide.load(study)
    done = counted(study)
    todo = max(0, opts.trials - done)
    if done:
        report(f"continuing study {opts.study_name!r}: {done} trials done, {todo} to go")
    start = time.monotonic()
    deadline = None if opts.time_budget_s is None else start + opts.time_budget_s
    converged = study_convergence(study, guide, opts)
    if converged is not None:
        report(f"converged already: {converged.reason} (--converge-after 0 searches on)")
        return StudyResult(study, converged, deadline)
    skipped: list[FrozenTrial] = []
    try:
        return _trials(study, guide, opts, machine, regions, report, reserve, skipped, start, done)
    finally:  # not started for their cost: the study's next run measures them (it has a first trial)
        for trial in skipped:
            requeue(study, trial)


def _trials(
    study: optuna.Study,
    guide: Guide,
    opts: StudyOptions,
    machine: Machine,
    regions: tuple[str, ...],
    report: Callable[[str], None],
    reserve: Callable[[optuna.Study], float] | None,
    skipped: list[FrozenTrial],
    start: float,
    done: int,
) -> StudyResult:
    """The loop of :func:`run_study`: a trial a turn until one of its ends; ``skipped`` collects the
    trials not started for their cost."""
    own_folder, base_sampler, ran = opts.storage is None, study.sampler, 0
    deadline = None if opts.time_budget_s is None else start + opts.time_budget_s
    converged = None
    while more_to_run(
        study,
        opts.trials,
        own_folder=own_folder,
        grace_period_s=opts.grace_period_s,
        report=report,
        deadline=deadline,
    ):
        timeout = None
        if ran and deadline is not None:
            kept = reserve(study) if reserve is not None else 0.0
            left, typical = deadline - time.monotonic() - kept, typical_trial_s(study)
            if left <= 0 or (typical is not None and left < typical):
                keeping = f" (keeping {kept:.0f} s to confirm the best)" if kept else ""
                report(
                    f"time budget of {opts.time_budget_s:.0f} s: {max(0.0, left):.0f} s left after {ran} trials of "
                    f"this run{keeping}, a trial takes ~{typical or 0:.0f} s; stopping (the same command continues "
                    "the study)"
                )
                break
            timeout = left
        guide.load(study)  # another worker may have moved the stages on
        fixed, stage = None, None
        queued = bool(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
        if not queued:  # queued trials go first, unguided
            fixed, stage = guide.next_trial(study, best_trial(study))
        with warnings.catch_warnings():  # experimental since 2.4
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.sampler = (
                base_sampler if fixed is None else PartialFixedSampler(fixed, base_sampler)
            )
        if counted(study) >= opts.trials:  # another worker took the last trial while this one chose
            continue
        trial = study.ask()
        if stage is not None and not trial.user_attrs.get(STOCK):
            trial.set_user_attr(STAGE, stage.stage)
            trial.set_user_attr(GROUP, "+".join(stage.groups))
        else:
            stage = None
        try:
            with heartbeat(study, trial), interruptible(study, trial):
                state, value = run_trial(trial, opts, machine, regions, timeout, queued)
            study.tell(trial, value, state=state) if state == TrialState.COMPLETE else study.tell(
                trial, state=state
            )
        except (
            optuna.exceptions.UpdateFinishedTrialError
        ):  # another worker failed it: its heartbeats were late
            report(
                f"warning: trial #{trial.number} was failed by another worker while it ran (no heartbeat for "
                f"{opts.grace_period_s} s: is this machine overloaded?); its result is dropped"
            )
            continue
        frozen = study.trials[trial.number]
        if reason_of(frozen) in QUEUED_AGAIN:  # not measured (time budget, its zygote died): again
            requeue(study, frozen)  # the stock trial always: the study keeps its baseline
            lost = interruptions(study, frozen)
            if frozen.user_attrs.get(STOCK) and lost >= MAX_INTERRUPTIONS:
                raise TrialError(
                    f"the stock trial was lost {lost} times in a row ({record_of(frozen).failure.error}); "
                    "the study has no baseline to measure against: see its log in the run folder's logs/; "
                    "it stays queued first, for the same command to run again",
                    INTERRUPTED,
                )
        if reason_of(frozen) == COST:
            skipped.append(frozen)
        guide.record(study, stage, frozen)
        keep_traces(study, guide, opts.out)
        converged = study_convergence(study, guide, opts)
        for again in rechecks(study):  # a reference exists now: compare what had none
            study.enqueue_trial(again.params, user_attrs={RECHECK_OF: again.number})
        write_diagnosis(
            opts.out,
            guide,
            converged,
            accuracy(study) if opts.memory_cap else None,
            parity_reference(study),
        )
        ran += 1
        report(
            progress_line(
                study,
                frozen,
                counted(study),
                opts.trials,
                start,
                ran,
                max(ran, opts.trials - done),
                stage,
                opts.time_budget_s,
                plateau=opts.plateau and opts.converge_after > 0,
            )
        )
        # under a memory budget a stock out of memory is what the guide's memory stage remedies
        capped_oom = opts.memory_cap and reason_of(frozen) == "oom"
        stopped = None if capped_oom else stock_failure(frozen, opts.out, opts.timeout_per_trial)
        if stopped is not None:
            queue_stock_again(study, frozen)
            return StudyResult(study, None, deadline, stopped)
        if converged is not None:
            study.set_user_attr(CONVERGED, json.dumps(converged.to_dict()))
            report(f"converged: {converged.reason}")
            break
        if _skipped_in_a_row(study) >= SKIPS_IN_A_ROW:
            report(
                f"time budget of {opts.time_budget_s:.0f} s: the last {SKIPS_IN_A_ROW} trials drawn were each expected "
                "to take longer than the time left; stopping (the same command continues the study)"
            )
            break
    return StudyResult(study, converged, deadline)


def _skipped_in_a_row(study: optuna.Study) -> int:
    """How many of the study's newest finished trials in a row were not started for their cost."""
    count = 0
    for t in reversed(study.get_trials(deepcopy=False)):
        if t.state == TrialState.WAITING:
            continue
        if reason_of(t) != COST:
            break
        count += 1
    return count


def study_convergence(study: optuna.Study, guide: Guide, opts: StudyOptions) -> Convergence | None:
    """Whether the study has converged (:mod:`autotune.search.converge`); without guidance every
    search trial counts as a free one."""
    stages = guide.stages
    if not guide.enabled:
        searched = [
            t.number
            for t in study.get_trials(deepcopy=False)
            if t.state.is_finished()
            and not (t.user_attrs.get(STOCK) or t.user_attrs.get(REFERENCE))
        ]
        stages = [
            Stage(
                stage=0,
                bottleneck=None,
                share=None,
                groups=["all"],
                knobs=[],
                incumbent=0,
                incumbent_samples_per_s=0.0,
                profile=None,
                buckets=None,
                dominant=None,
                kind="free",
                trials=searched,
            )
        ]
    found = convergence(study, stages, opts.converge_after)
    if found is None and opts.plateau and opts.converge_after > 0:
        found = plateau(study, stages[-1].stage if stages else 0)
    return found


def typical_trial_s(study: optuna.Study) -> float | None:
    """The median wall time of the study's trials that ran (refused and budget-stopped ones aside)."""
    spans = [
        span_s(t)
        for t in study.get_trials(deepcopy=False)
        if t.state.is_finished()
        and t.datetime_start
        and t.datetime_complete
        and reason_of(t) not in ("config", DUPLICATE, COST, PREDICTED_OOM, *QUEUED_AGAIN)
    ]
    return statistics.median(spans) if spans else None


def check_space_unchanged(study: optuna.Study, space: SearchSpace) -> None:
    """A study continues only with the space it began with (Optuna keeps one distribution a knob)."""
    probe = optuna.create_study(direction="maximize")
    trial = probe.ask()
    try:
        sample(trial, space)  # the distributions this space gives, as the knobs are conditioned
    except ConfigError:
        return
    mine = trial.distributions
    for t in study.get_trials(deepcopy=False):
        for key, dist in t.distributions.items():
            if key in mine:
                try:
                    optuna.distributions.check_distribution_compatibility(dist, mine[key])
                except ValueError:
                    raise ConfigError(
                        f"{space.path}: knobs.{key}: the space changed since study {study.study_name!r} "
                        f"began ({dist} then, {mine[key]} now); continue it with the old space or "
                        "start a new study with another --out"
                    ) from None


def write_diagnosis(
    out: Path,
    guide: Guide,
    converged: Convergence | None = None,
    prediction: dict[str, Any] | None = None,
    reference: Reference | None = None,
) -> None:
    """``diagnosis.json``: the guide's stages, the convergence, under a memory budget how the
    predicted peaks matched the measured ones (:func:`autotune.search.predict.accuracy`), and the
    loss-parity reference (:func:`autotune.search.vet.parity_reference`; None: none yet)."""
    from autotune.config.io import write_text_atomic

    data = {
        **guide.to_dict(),
        "converged": converged.to_dict() if converged is not None else None,
        "parity_reference": reference.to_dict() if reference is not None else None,
    }
    if prediction is not None:
        data["memory_prediction"] = prediction
    write_text_atomic(out / "diagnosis.json", json.dumps(data, indent=1))
