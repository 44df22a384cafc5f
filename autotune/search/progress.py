"""The line ``autotune run`` prints after each trial."""

from __future__ import annotations

import time

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.search.converge import plateau_left_s
from autotune.search.noise import flags
from autotune.search.stage import Stage
from autotune.search.trials import (
    COST,
    DUPLICATE,
    NOISY,
    PREDICTED_OOM,
    REFERENCE,
    STOCK,
    best_trial,
    feasible,
    parity_passed,
    parity_pending,
    parity_undecided,
    record_of,
    stock_trial,
)


def progress_line(
    study: optuna.Study,
    trial: FrozenTrial,
    index: int,
    total: int,
    start: float,
    ran: int,
    todo: int,
    stage: Stage | None = None,
    budget_s: float | None = None,
    plateau: bool = False,
) -> str:
    """``trial 3/8 #2 [data_stall -> data]: 12.31 samples/s | best 12.31 (#2, 1.21x stock) | 0:45 elapsed, ~1:30 left``.

    The time left is the trials still to run at the pace so far, no more than the budget leaves, and
    with ``plateau`` (a study left to end by itself) no more than the plateau rule leaves
    (:func:`autotune.search.converge.plateau_left_s`): then it says "unless a trial beats the best".
    """
    record = record_of(trial)
    failure = record.failure if record is not None else None
    if trial.state == TrialState.PRUNED:
        what = f"pruned ({failure.error if failure else ''})"
    elif failure is not None and failure.reason in (DUPLICATE, PREDICTED_OOM):
        what = f"skipped: {failure.error}"
    elif failure is not None and failure.reason == COST:
        what = failure.error  # "not started: expected ~N s (...), M s left of the time budget; ..."
    elif failure is not None:
        what = f"failed ({failure.reason}): {_cut_middle(failure.error)}"
    elif trial.value is None:  # lost with its worker: no record
        what = "failed (interrupted)"
    else:
        what = (
            f"{trial.value:.2f} samples/s"
            + _noise_note(trial)
            + ("" if feasible(trial) else " (over the memory budget)")
        )
    if trial.user_attrs.get(STOCK):
        what += " [stock]"
    if trial.user_attrs.get(REFERENCE):
        what += f" [reference: {trial.user_attrs[REFERENCE]}]"
    best, stock = best_trial(study), stock_trial(study)
    inc = "no feasible trial yet"
    if best is not None:
        inc = f"best {best.value:.2f} (#{best.number}"
        if stock is not None and feasible(stock) and stock.value:
            inc += f", {best.value / stock.value:.2f}x stock"
        inc += ")"
    elapsed = time.monotonic() - start
    left = elapsed / ran * (todo - ran)
    if budget_s is not None:  # no trial starts after the budget; the last one may run past it
        left = min(left, max(0.0, budget_s - elapsed))
    bound = plateau_left_s(study) if plateau else None
    unless = ""
    if bound is not None and bound < left:
        left, unless = bound, " unless a trial beats the best"
    where = ""
    if stage is not None:
        where = f" [{stage.bottleneck or 'free'} -> {'+'.join(stage.groups)}]"
    return f"trial {index}/{total} #{trial.number}{where}: {what} | {inc} | {_clock(elapsed)} elapsed, ~{_clock(left)} left{unless}"


def _noise_note(trial: FrozenTrial) -> str:
    """`` ±3 %``, and what the study made of a noisy measurement or a failed parity."""
    record = record_of(trial)
    m = record.measurement if record is not None else None
    if m is None:
        return ""
    one = m.steps is not None and m.steps < 2  # one step has no spread to show
    note = " 1 step, no spread" if one else f" ±{50 * m.step_time.spread:.0f} %"
    again = record.remeasure
    if again is not None:
        second = (
            f"{again.measurement.samples_per_s:.2f}"
            if again.measurement
            else f"failed ({again.failure.reason})"
        )
        note += f" (noisy, measured again: {m.samples_per_s:.2f} then {second})"
    elif flags(record):
        note += f" [noisy: {'; '.join(flags(record))}]"
    if trial.user_attrs.get(NOISY):
        note += " [not taken as the best on its word]"
    if parity_passed(trial) is False:
        note += " [loss parity with stock FAILED: never the best]"
    elif why := parity_undecided(trial):
        note += f" [loss parity undecided, {why}: not the best]"
    elif parity_pending(trial):
        note += " [changes what is computed, no parity reference yet: not the best]"
    return note


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def _cut_middle(text: str, limit: int = 160) -> str:
    """``text`` within ``limit`` characters, its middle left out: an error begins with the path it
    names and ends with what is wrong, which a cut at the end would lose."""
    if len(text) <= limit:
        return text
    keep = (limit - 3) // 3
    return f"{text[:keep]}...{text[-(limit - 3 - keep) :]}"
