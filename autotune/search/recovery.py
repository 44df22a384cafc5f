"""Trials that did not reach a verdict: failed with their true reason, queued again, not counted.

A trial ends without a verdict on its configuration when

* the time budget ran out (``budget``), or the tuner was stopped by a signal while it ran
  (``interrupted``, :func:`interruptible`);
* its worker died: in the run folder's own journal, a trial still RUNNING when a tuner takes the
  folder (:mod:`autotune.ownership`: no other tuner is alive there) was lost with a killed tuner;
  in a database, a trial whose heartbeat stopped for longer than the grace period was lost with
  its worker (:func:`recover_lost`, which any worker calls before it counts the study's trials).

Each is failed with a record saying so, and its parameters are queued again (:func:`requeue`),
so that the next worker to ask measures them. Such a trial does not count toward ``--trials``
(:func:`counted`); :func:`more_to_run` waits for the running trials of other workers before it
calls the study done, since one of them may still be lost and queued again.
"""

from __future__ import annotations

import signal
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import optuna
from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled
from optuna.trial import FrozenTrial, TrialState

from autotune.search.retry import without_retries
from autotune.search.trials import (
    COST,
    INTERRUPTED,
    QUEUED_AGAIN,
    QUEUED_AGAIN_FROM,
    REFERENCE,
    STOCK,
    WORKER,
    attrs_of,
    reason_of,
    store,
)
from autotune.train.trial.record import TrialRecord

MAX_INTERRUPTIONS = 3
"""A configuration interrupted this many times in a row is not queued again (it may be what kills its worker)."""


def recover_lost(study: optuna.Study, *, own_folder: bool, grace_period_s: float) -> list[str]:
    """Fail and queue again the study's lost trials; a line for each.

    ``own_folder``: the study is the run folder's own journal, whose lock this tuner holds, so
    every RUNNING trial in it is lost. Otherwise the trials whose heartbeat is older than the grace
    period are (a no-op for a storage without heartbeats).
    """
    if own_folder:
        lost = [t._trial_id for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
        why = "its tuner {worker} stopped before the trial ended (killed: the trial was still running when the study was opened again)"
    else:
        lost = _stale_trial_ids(study)
        why = f"its worker {{worker}} stopped sending heartbeats for more than {grace_period_s:.0f} s (killed, or its machine lost)"
    lines = []
    for trial_id in lost:
        trial = study._storage.get_trial(trial_id)
        record = TrialRecord.failed(
            INTERRUPTED, why.format(worker=trial.user_attrs.get(WORKER, "(unknown)"))
        )
        if _fail(study, trial_id, record):
            again = requeue(study, study._storage.get_trial(trial_id))
            lines.append(
                f"trial #{trial.number} was lost: {record.failure.error}; "
                + (f"queued again as #{again}" if again is not None else "not queued again")
            )
    return lines


def running_elsewhere(study: optuna.Study, *, own_folder: bool) -> list[FrozenTrial]:
    """The trials other workers are running now: none in the run folder's own journal (no other
    tuner is alive there, see :func:`recover_lost`), else those whose heartbeat is not stale."""
    if own_folder:
        return []
    stale = set(_stale_trial_ids(study))
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    return [t for t in running if t._trial_id not in stale]


def _stale_trial_ids(study: optuna.Study) -> list[int]:
    storage = study._storage
    if not isinstance(storage, BaseHeartbeat):
        return []
    with warnings.catch_warnings():  # experimental since Optuna 2.9
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if not is_heartbeat_enabled(storage):
            return []
        # Optuna's fail_stale_trials fails them without a word; the record must go in first,
        # while the trial is still RUNNING, so the ids come from the storage's own query.
        return storage._get_stale_trial_ids(study._study_id)


def _fail(study: optuna.Study, trial_id: int, record: TrialRecord) -> bool:
    """Store ``record`` in the running trial and fail it; False when another worker was first."""
    storage = study._storage
    try:
        for key, value in attrs_of(record).items():
            storage.set_trial_user_attr(trial_id, key, value)
        return bool(storage.set_trial_state_values(trial_id, state=TrialState.FAIL))
    except optuna.exceptions.UpdateFinishedTrialError:
        return False


def requeue(study: optuna.Study, trial: FrozenTrial) -> int | None:
    """Queue ``trial``'s parameters again (its stock or reference mark kept); the new trial's
    number, None when it was interrupted :data:`MAX_INTERRUPTIONS` times in a row. The stock trial
    is always queued again: a study never goes on without its baseline (the caller decides whether
    to stop, :func:`interruptions`)."""
    if (
        reason_of(trial) == INTERRUPTED
        and not trial.user_attrs.get(STOCK)
        and interruptions(study, trial) >= MAX_INTERRUPTIONS
    ):
        return None
    keep = {k: trial.user_attrs[k] for k in (STOCK, REFERENCE) if k in trial.user_attrs}
    # a trial stopped while its parameters were being drawn holds only some of them: those it was
    # queued with (stock's, a reference's) are the configuration it stood for
    params = {**trial.params, **trial.system_attrs.get("fixed_params", {})}
    study.enqueue_trial(params, user_attrs={**keep, QUEUED_AGAIN_FROM: trial.number})
    return study.get_trials(deepcopy=False)[-1].number


def interruptions(study: optuna.Study, trial: FrozenTrial) -> int:
    """How many times in a row ``trial``'s parameters were interrupted, ``trial`` included."""
    trials, count = study.get_trials(deepcopy=False), 0
    while trial is not None and reason_of(trial) == INTERRUPTED:
        count += 1
        origin = trial.user_attrs.get(QUEUED_AGAIN_FROM)
        trial = trials[origin] if isinstance(origin, int) and origin < len(trials) else None
    return count


def counted(study: optuna.Study) -> int:
    """Trials that count toward ``--trials``: finished or running, but not those queued again nor
    those not started for their cost."""
    trials = study.get_trials(deepcopy=False)
    again = {t.user_attrs.get(QUEUED_AGAIN_FROM) for t in trials}
    return sum(
        t.state != TrialState.WAITING
        and reason_of(t) != COST  # not started: the time left was too short for it
        and not (reason_of(t) in QUEUED_AGAIN and t.number in again)
        for t in trials
    )


def more_to_run(
    study: optuna.Study,
    trials: int,
    *,
    own_folder: bool,
    grace_period_s: float,
    report: Callable[[str], None],
    deadline: float | None = None,
) -> bool:
    """Whether to start another trial: fewer than ``trials`` count. With enough, wait while other
    workers' trials run (one may be lost, and queued again) and until ``deadline``; False when done."""
    waiting = False
    while True:
        if not own_folder:
            for line in recover_lost(study, own_folder=False, grace_period_s=grace_period_s):
                report(line)
        if counted(study) < trials:
            return True
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if not running or (deadline is not None and time.monotonic() >= deadline):
            return False
        if not waiting:
            workers = ", ".join(f"#{t.number} on {t.user_attrs.get(WORKER, '?')}" for t in running)
            report(
                f"the study has its {trials} trials; waiting for those of other workers still running ({workers}) "
                f"to finish, or to be failed after {grace_period_s:.0f} s without a heartbeat"
            )
            waiting = True
        time.sleep(max(1.0, grace_period_s / 8))


@contextmanager
def interruptible(study: optuna.Study, trial: optuna.Trial) -> Iterator[None]:
    """Run the body; a SIGTERM or SIGHUP (SystemExit) or Ctrl-C in it fails ``trial`` as
    ``interrupted`` and queues it again before the exception goes on."""
    try:
        yield
    except (KeyboardInterrupt, SystemExit) as stop:
        name = "SIGINT" if isinstance(stop, KeyboardInterrupt) else _signal_of(stop)
        record = TrialRecord.failed(
            INTERRUPTED, f"the tuner was stopped by {name} while the trial ran"
        )
        # The stop goes on whether this is recorded or not: a trial left running is failed by the
        # folder's next run, or by another worker once its heartbeat is stale; a database that is
        # away (or another worker that failed the trial first) must not hold the stop up or end it
        # with another error.
        with without_retries(), suppress(Exception):
            store(trial, record)
            study.tell(trial, state=TrialState.FAIL)
            requeue(study, study.get_trials(deepcopy=False)[trial.number])
        raise


def _signal_of(stop: SystemExit) -> str:
    code = stop.code if isinstance(stop.code, int) else 0
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return f"an exit (code {stop.code})"
