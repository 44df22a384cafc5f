"""Trials told without being run (:func:`not_run`): too costly for the time left of the budget, a
configuration measured already, or predicted over the memory budget. How each is told is in
:mod:`autotune.search.objective`."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from autotune.config import TrainConfig
from autotune.search.expected import expected_of, too_costly
from autotune.search.options import StudyOptions
from autotune.search.params import config_of
from autotune.search.predict import predicted_of, too_large
from autotune.search.trials import (
    BUDGET,
    COST,
    DUPLICATE,
    PREDICTED,
    PREDICTED_OOM,
    STOCK,
    reason_of,
    store,
)
from autotune.train.trial.record import TrialRecord


def not_run(
    trial: optuna.Trial,
    cfg: TrainConfig,
    opts: StudyOptions,
    timeout: float | None,
    *,
    search: bool,
    queued: bool,
) -> tuple[TrialState, float | None] | None:
    """A trial told without running it, its state and value: too costly for the time left, a
    duplicate, or predicted over the memory budget (see the module docstring); None: run it."""
    if timeout is not None:  # the budget's end is near: a trial that cannot finish is not started
        why = too_costly(
            expected_of(cfg, trial.study, lambda t: config_of(opts, t)),
            min(timeout, opts.timeout_per_trial),
        )
        if why is not None:
            store(trial, TrialRecord.failed(COST, why))
            return TrialState.FAIL, None
    same = duplicate_of(trial) if search and not queued else None
    # what it would measure is known: the sampler learns nothing from running it
    if same is not None:
        store(
            trial,
            TrialRecord.failed(
                DUPLICATE, f"the same configuration as trial #{same}, not run again"
            ),
        )
        return TrialState.FAIL, None
    if not trial.user_attrs.get(STOCK) and opts.memory_cap:
        return predict_peak(trial, cfg, opts, may_skip=search)
    return None


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


def duplicate_of(trial: optuna.Trial) -> int | None:
    """The number of a trial that ran (measured or pruned) with exactly this trial's parameters."""
    params = trial.params
    for t in trial.study.get_trials(
        deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)
    ):
        if t.number != trial.number and t.params == params and reason_of(t) != BUDGET:
            return t.number
    return None
