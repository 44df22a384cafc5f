"""A study stops when its stock trial cannot run.

Every speed-up is measured against the stock trial; a configuration whose stock run fails (a
preset too large for the machine, a crash in the workload, out of memory) fails the same way in
every trial the search would start, so the study would spend its trials, often half an hour, on
nothing. Instead it stops after the stock trial with one line saying why and what to change, the
stock trial queued again so that the same command, once fixed, measures it first.
"""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.search.trials import QUEUED_AGAIN, QUEUED_AGAIN_FROM, STOCK, reason_of, record_of

FIXES = {
    "timeout": "on a CPU use the tiny preset (--preset tiny), else a longer --timeout-per-trial",
    "oom": "give a smaller --batch-size or preset, or a machine with more memory",
    "config": "change the configuration (--base, --batch-size, --preset) as the error says",
    "data": "fix the dataset as the error says (`autotune data check DIR` finds its first problem)",
    "nan": "the stock configuration's loss is not finite: check the data and the workload's loss",
}
DEFAULT_FIX = "fix the workload or its data as the log says"


def stock_failure(trial: FrozenTrial, out: Path, timeout_s: float) -> str | None:
    """The line that stops the study when ``trial`` is the stock trial and gave no measurement
    (None otherwise: a measured stock, or one stopped by the budget or a signal, which is queued
    again anyway)."""
    if not trial.user_attrs.get(STOCK):
        return None
    reason = reason_of(trial)
    measured = trial.state == TrialState.COMPLETE and reason is None
    if (
        measured
        or reason in QUEUED_AGAIN
        or trial.state not in (TrialState.FAIL, TrialState.COMPLETE)
    ):
        return None
    record = record_of(trial)
    error = record.failure.error.strip().splitlines()[0][:200] if record and record.failure else ""
    if reason == "timeout":
        error = f"it did not finish within --timeout-per-trial {timeout_s:.0f} s"
    log = out / "logs" / f"trial-{trial.number:04d}.log"
    where = f"; its log: {log}" if log.is_file() else ""
    return (
        f"the stock trial (#{trial.number}) failed ({reason}): {error}{where}; every trial would fail "
        f"alike, so the study stops: {FIXES.get(reason or '', DEFAULT_FIX)}, then run the same command "
        "again (it measures the stock trial first)"
    )


def queue_stock_again(study: optuna.Study, trial: FrozenTrial) -> None:
    """Queue the failed stock trial's parameters again (once), for the study's next run."""
    from autotune.search.recovery import requeue

    already = any(
        t.user_attrs.get(QUEUED_AGAIN_FROM) == trial.number
        for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    )
    if not already:
        requeue(study, trial)
