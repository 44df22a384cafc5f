"""One stage of the guided search (:class:`Stage`), as the study keeps it, and what it has done:
whether it is over (:func:`over`), its best trial and gain (:func:`update_best`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.errors import ConfigError
from autotune.search.noise import beats, margin
from autotune.search.trials import eligible, measurement_of
from autotune.train.trial.record import loads_attr

STAGE_PATIENCE = 1
"""A search stage ends after this many trials in a row that gained nothing beyond noise over its incumbent."""

STUDY_ATTR = "autotune.diagnosis"
FREE = "all"
STAGES = "the JSON list of the stages of the guided search, as autotune writes it"


@dataclass
class Stage:
    """One stage of the search: what the profile said, what was tried, what it gained."""

    stage: int
    bottleneck: str | None
    share: float | None
    groups: list[str]
    knobs: list[str]
    incumbent: int
    incumbent_samples_per_s: float
    profile: str | None
    buckets: dict[str, float] | None
    dominant: str | None
    kind: str = "search"
    """``remedies``: one trial, the remedy values of every group in ``groups`` at once; ``remedy``: one
    trial, the group's remedy values; ``search``: the group's knobs varied; ``free``: the sampler over
    every knob; ``memory``: stock did not fit the memory budget, one trial per rung of
    :func:`autotune.search.fit.ladder` until one fits."""
    memory: list[dict[str, Any]] = field(default_factory=list)
    """A ``memory`` stage: each trial's peak against the memory budget (``peak_bytes``,
    ``budget_bytes``, ``fits``), the stock trial's first."""
    loader_bound: bool = False
    """The incumbent's measured rate was its loader's, below its steps' rate: ``share`` is then at least
    the part of its step spent waiting on the loader (see :func:`ranked_buckets`)."""
    loader_short: list[float] | None = None
    """A ``remedies`` stage joined by the data group's remedies although the profile showed no stall:
    [what the incumbent's loader sustains, the step's compute ceiling], samples/s
    (:func:`autotune.search.bottleneck.loader_short`)."""
    trials: list[int] = field(default_factory=list)
    best_trial: int | None = None
    best_samples_per_s: float | None = None
    gain: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def stages_of(study: optuna.Study) -> list[Stage]:
    """The stages the study keeps (:data:`STUDY_ATTR`); one that is not a list of stages is a
    ConfigError naming the study and the key."""
    raw = study.user_attrs.get(STUDY_ATTR)
    if not raw:
        return []
    where = f"study {study.study_name!r}: user_attrs.{STUDY_ATTR}"
    kept = loads_attr(raw, where, STAGES)
    try:
        return [Stage(**s) for s in kept]
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}; allowed: {STAGES}") from None


def over(
    study: optuna.Study, stage: Stage, incumbent: FrozenTrial, untried: list | None, length: int
) -> bool:
    """Whether ``stage`` has had its trials: its ``length``, every candidate measured, its patience spent
    (a search), or, for the free stage, a trial that beat its incumbent beyond noise."""
    if stage.kind == "memory":  # a trial fits: the usual stages go on from it
        return True
    if stage.kind == "free":
        if incumbent.number == stage.incumbent or stage.incumbent >= len(study.trials):
            return False
        old = study.trials[stage.incumbent]
        return beats(
            float(incumbent.value),
            float(old.value or 0.0),
            margin(measurement_of(incumbent), measurement_of(old)),
        )
    if len(stage.trials) >= length or untried == []:
        return True
    return stage.kind == "search" and misses(study, stage) >= STAGE_PATIENCE


def misses(study: optuna.Study, stage: Stage) -> int:
    """Trials at the end of the stage that gained nothing beyond noise over its incumbent."""
    if stage.incumbent >= len(study.trials):
        return 0
    base = study.trials[stage.incumbent]
    count = 0
    for number in reversed(stage.trials):
        t = study.trials[number] if number < len(study.trials) else None
        gained = (
            t is not None
            and eligible(t)
            and beats(
                float(t.value),
                stage.incumbent_samples_per_s,
                margin(measurement_of(t), measurement_of(base)),
            )
        )
        if gained:
            break
        count += 1
    return count


def update_best(study: optuna.Study, stage: Stage) -> None:
    """Set the stage's best eligible trial, its rate, and its gain over the incumbent."""
    trials = [study.trials[n] for n in stage.trials if n < len(study.trials)]
    ok = [t for t in trials if eligible(t)]
    if ok:
        best = max(ok, key=lambda t: t.value)
        stage.best_trial, stage.best_samples_per_s = best.number, float(best.value)
        if stage.incumbent_samples_per_s:
            stage.gain = stage.best_samples_per_s / stage.incumbent_samples_per_s
