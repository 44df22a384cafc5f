"""One turn of the study's loop (:mod:`autotune.search.study`): ask for a trial, run it and tell
the study, then bring the guide's stages, the run folder and the rechecks up to date."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import optuna
from optuna.samplers import PartialFixedSampler
from optuna.trial import FrozenTrial, TrialState

from autotune.config.compat import Machine
from autotune.errors import TrialError
from autotune.search.converge import Convergence, study_convergence
from autotune.search.diagnosis import keep_traces, write_diagnosis
from autotune.search.guide import Guide
from autotune.search.objective import run_trial
from autotune.search.options import StudyOptions
from autotune.search.predict import accuracy
from autotune.search.recovery import (
    MAX_INTERRUPTIONS,
    counted,
    interruptible,
    interruptions,
    requeue,
)
from autotune.search.stage import Stage
from autotune.search.storage import claiming, heartbeat
from autotune.search.trials import (
    GROUP,
    QUEUED_AGAIN,
    RECHECK_OF,
    STAGE,
    STOCK,
    best_trial,
    reason_of,
    record_of,
)
from autotune.search.vet import parity_reference, rechecks
from autotune.train.trial.record import INTERRUPTED


def ask(
    study: optuna.Study, guide: Guide, opts: StudyOptions, base_sampler: optuna.samplers.BaseSampler
) -> tuple[optuna.Trial, Stage | None, bool] | None:
    """The next trial, its stage (None: unguided) and whether it was queued; queued trials go first,
    unguided, the others with the parameters the guide fixes. None: the study has its trials."""
    guide.load(study)  # another worker may have moved the stages on
    fixed, stage = None, None
    queued = bool(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
    if not queued:
        fixed, stage = guide.next_trial(study, best_trial(study))
    with warnings.catch_warnings():  # experimental since 2.4
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.sampler = base_sampler if fixed is None else PartialFixedSampler(fixed, base_sampler)
    with claiming(study):  # another worker may be taking the last trial now
        if counted(study) >= opts.trials:
            return None
        trial = study.ask()
    if stage is not None and not trial.user_attrs.get(STOCK):
        trial.set_user_attr(STAGE, stage.stage)
        trial.set_user_attr(GROUP, "+".join(stage.groups))
    else:
        stage = None
    return trial, stage, queued


def run_and_tell(
    study: optuna.Study,
    trial: optuna.Trial,
    opts: StudyOptions,
    machine: Machine,
    regions: tuple[str, ...],
    timeout: float | None,
    queued: bool,
    report: Callable[[str], None],
) -> FrozenTrial | None:
    """Run the trial and tell the study; the trial as told, queued again where it was not measured
    (None: another worker failed it meanwhile, and its result is dropped)."""
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
        return None
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
    return frozen


def after_trial(
    study: optuna.Study, guide: Guide, opts: StudyOptions, stage: Stage | None, frozen: FrozenTrial
) -> Convergence | None:
    """The trial's stage, the run folder and the rechecks it makes due brought up to date; whether
    the study has converged now."""
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
    return converged
