"""The study's sampler and pruner: what Optuna proposes next, and when it stops a trial early."""

from __future__ import annotations

import statistics
import warnings
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.errors import ConfigError
from autotune.search.trials import REFERENCE, STOCK, best_trial

SAMPLERS = ("tpe", "gp", "random")
PRUNE_P = 0.1
"""The one-sided p-value below which a trial's steps are significantly slower than the best's."""


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    """TPE (joint over the knobs, conditional knobs grouped), GP or random; all read ``set_constraint``."""
    if name == "tpe":
        with warnings.catch_warnings():  # multivariate and group are "experimental" since 2.2
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(
                seed=seed, multivariate=True, group=True, n_startup_trials=5
            )
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=5)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ConfigError(f"--sampler: {name!r} is not one of {list(SAMPLERS)}")


def make_pruner(prune: bool) -> optuna.pruners.BasePruner:
    """Wilcoxon's signed-rank test of a trial's step times against the best trial's, or none."""
    if not prune:
        return optuna.pruners.NopPruner()
    with warnings.catch_warnings():  # experimental since 3.6
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return ClearlyWorsePruner(
            optuna.pruners.WilcoxonPruner(p_threshold=PRUNE_P, n_startup_steps=2)
        )


class ClearlyWorsePruner(optuna.pruners.BasePruner):
    """``inner``'s verdict, or: after ``min_steps`` steps, even the trial's fastest step is slower
    than ``ratio`` times the best trial's median step (a test needs more steps than a short
    window gives to call a 10x slower trial significant)."""

    def __init__(
        self, inner: optuna.pruners.BasePruner, ratio: float = 0.5, min_steps: int = 2
    ) -> None:
        self.inner, self.ratio, self.min_steps = inner, ratio, min_steps

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        if trial.user_attrs.get(STOCK) or trial.user_attrs.get(REFERENCE):
            # measured for comparison: pruned, they compare with nothing (on two H200s a pruned
            # compile reference left the report without the rate a user would get instead)
            return False
        best = best_trial(study)
        if best is None:  # no measured search trial yet
            return False
        if self.inner.prune(_BestIs(study, best), trial):
            return True
        values = list(trial.intermediate_values.values())
        if len(values) < self.min_steps:
            return False
        reference = list(best.intermediate_values.values())
        return bool(reference) and max(values) < self.ratio * statistics.median(reference)


class _BestIs:
    """The study as a pruner sees it, with ``best_trial`` the search's best (:func:`best_trial`):
    a faster reference, which is never the incumbent, does not prune the trials that beat the incumbent."""

    def __init__(self, study: optuna.Study, best: FrozenTrial) -> None:
        self._study, self.best_trial = study, best

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)
