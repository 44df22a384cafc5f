"""One tuning study: Optuna's ask-and-tell loop over trials run in fresh processes.

Each turn asks the study for a trial (queued ones first; otherwise with the parameters the guide
fixes for its stage, :mod:`autotune.search.guide`), runs it (:func:`autotune.search.objective.run_trial`:
how a trial ends is there), tells the study, and keeps the run folder up to date
(:mod:`autotune.search.diagnosis`). A trial stopped by the time budget or lost with its worker is
queued again (:mod:`autotune.search.recovery`). The study stops after ``trials`` trials, at the end
of the time budget (leaving the caller's ``reserve`` for confirming the winner), or when it has
converged (:mod:`autotune.search.converge`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config.compat import Machine
from autotune.search import settings
from autotune.search.baseline import queue_stock_again, stock_failure
from autotune.search.converge import Convergence, study_convergence
from autotune.search.guide import Guide
from autotune.search.options import StudyOptions
from autotune.search.params import check_space_unchanged
from autotune.search.progress import progress_line
from autotune.search.recovery import (
    counted,
    more_to_run,
    recover_lost,
    requeue,
    running_elsewhere,
)
from autotune.search.sampling import make_pruner, make_sampler
from autotune.search.storage import open_storage
from autotune.search.time_budget import SKIPS_IN_A_ROW, skipped_in_a_row, time_left
from autotune.search.trials import CONVERGED, COST, REFERENCE, STOCK, reason_of
from autotune.search.turn import after_trial, ask, run_and_tell


@dataclass
class StudyResult:
    """How :func:`run_study` ended."""

    study: optuna.Study
    converged: Convergence | None = None
    deadline: float | None = None
    """``time.monotonic()`` at the end of the time budget (None: no budget)."""
    stopped: str | None = None
    """Why the study stopped before its end (its stock trial cannot run: :mod:`autotune.search.baseline`)."""


def open_study(opts: StudyOptions) -> optuna.Study:
    """Create the study with the stock configuration queued first, or load it to continue."""
    # Optuna's "a new study created" lines, one of them for the in-memory probe of
    # check_space_unchanged, are not news: the run prints what it does in its own words.
    optuna.logging.set_verbosity(optuna.logging.WARNING)
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
        running = running_elsewhere(study, own_folder=opts.storage is None)
        settings.check_unchanged(study, opts, running)
        check_space_unchanged(study, opts.space)
        _finish_creating(study, opts)
        return study
    settings.record(study, opts)
    study.enqueue_trial(opts.space.stock_params(opts.base), user_attrs={STOCK: True})
    return study


def _finish_creating(study: optuna.Study, opts: StudyOptions) -> None:
    """Record the settings and queue the stock trial of a study whose creator was stopped (a signal,
    a full disk, a database gone) after creating it and before doing so; queue stock again where a
    run was stopped after failing its stock trial and before queueing it again. Without them its
    settings would go unchecked and it would never measure its baseline. (A worker that starts while
    another creates the study may queue stock a second time: measured twice, stock is still stock.)"""
    trials = study.get_trials(deepcopy=False)
    if settings.KEY not in study.user_attrs and not trials:
        settings.record(study, opts)
    stock = [t for t in trials if t.user_attrs.get(STOCK)]
    if any(t.state in (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE) for t in stock):
        return
    if stock:
        requeue(study, stock[-1])
    else:
        study.enqueue_trial(opts.space.stock_params(opts.base), user_attrs={STOCK: True})


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
            timeout, why = time_left(study, opts, reserve, deadline, ran)
            if why is not None:
                report(why)
                break
        asked = ask(study, guide, opts, base_sampler)
        if asked is None:  # another worker took the last trial while this one chose
            continue
        trial, stage, queued = asked
        frozen = run_and_tell(study, trial, opts, machine, regions, timeout, queued, report)
        if frozen is None:
            continue
        if reason_of(frozen) == COST:
            skipped.append(frozen)
        converged = after_trial(study, guide, opts, stage, frozen)
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
        end, stopped = _ends_after(study, frozen, opts, converged, report)
        if stopped is not None:
            return StudyResult(study, None, deadline, stopped)
        if end:
            break
    return StudyResult(study, converged, deadline)


def _ends_after(
    study: optuna.Study,
    frozen: FrozenTrial,
    opts: StudyOptions,
    converged: Convergence | None,
    report: Callable[[str], None],
) -> tuple[bool, str | None]:
    """Whether the study ends after the trial ``frozen``, and why where its stock trial cannot run
    (:mod:`autotune.search.baseline`; None: it converged, or the trials drawn cost too much)."""
    # under a memory budget a stock out of memory is what the guide's memory stage remedies
    capped_oom = opts.memory_cap and reason_of(frozen) == "oom"
    stopped = None if capped_oom else stock_failure(frozen, opts.out, opts.timeout_per_trial)
    if stopped is not None:
        queue_stock_again(study, frozen)
        return True, stopped
    if converged is not None:
        study.set_user_attr(CONVERGED, json.dumps(converged.to_dict()))
        report(f"converged: {converged.reason}")
        return True, None
    if skipped_in_a_row(study) >= SKIPS_IN_A_ROW:
        report(
            f"time budget of {opts.time_budget_s:.0f} s: the last {SKIPS_IN_A_ROW} trials drawn were each expected "
            "to take longer than the time left; stopping (the same command continues the study)"
        )
        return True, None
    return False, None
