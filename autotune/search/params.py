"""Between Optuna's parameters and configurations: a trial's knobs sampled in order, the
configuration a trial ran rebuilt from them, and the check that a continued study keeps its space."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.config import TrainConfig
from autotune.errors import ConfigError
from autotune.search.knobs import SearchSpace, apply_values
from autotune.search.options import StudyOptions


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
