"""The study's time budget (``--time-budget``): whether the next trial may start, and when the
trials drawn keep being too costly for the time left. A trial is typical of the study when it ran:
those refused or stopped by the budget do not count."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import optuna
from optuna.trial import TrialState

from autotune.search.options import StudyOptions
from autotune.search.trials import (
    COST,
    DUPLICATE,
    PREDICTED_OOM,
    QUEUED_AGAIN,
    measured,
    reason_of,
    span_s,
)

SKIPS_IN_A_ROW = 3
"""Trials in a row not started for their cost after which a study under a time budget stops."""


def time_left(
    study: optuna.Study,
    opts: StudyOptions,
    reserve: Callable[[optuna.Study], float] | None,
    deadline: float,
    ran: int,
) -> tuple[float, str | None]:
    """The time the next trial may take, and why it does not start (None: it starts): less is left
    of the budget, ``reserve(study)`` kept, than a typical trial of the study takes."""
    kept = reserve(study) if reserve is not None else 0.0
    left, typical = deadline - time.monotonic() - kept, typical_trial_s(study)
    if left <= 0 or (typical is not None and left < typical):
        keeping = f" (keeping {kept:.0f} s to confirm the best)" if kept else ""
        return left, (
            f"time budget of {opts.time_budget_s:.0f} s: {max(0.0, left):.0f} s left after {ran} trials of "
            f"this run{keeping}, a trial takes ~{typical or 0:.0f} s; stopping (the same command continues "
            "the study)"
        )
    return left, None


def skipped_in_a_row(study: optuna.Study) -> int:
    """How many of the study's newest finished trials in a row were not started for their cost."""
    count = 0
    for t in reversed(study.get_trials(deepcopy=False)):
        if t.state == TrialState.WAITING:
            continue
        if reason_of(t) != COST:
            break
        count += 1
    return count


def typical_trial_s(study: optuna.Study) -> float | None:
    """The median wall time of the study's trials that ran (refused and budget-stopped ones aside):
    of those that measured, where any did (a trial that runs out of memory in its first step takes
    a fraction of one that measures, and a study under a tight budget may have run many)."""
    ran = [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state.is_finished()
        and t.datetime_start
        and t.datetime_complete
        and reason_of(t) not in ("config", DUPLICATE, COST, PREDICTED_OOM, *QUEUED_AGAIN)
    ]
    spans = [span_s(t) for t in ran if measured(t)] or [span_s(t) for t in ran]
    return statistics.median(spans) if spans else None
