"""When a study has converged, so that ``autotune run`` without ``--trials`` ends by itself.

The guide runs a ``free`` stage (TPE over every knob) only when no bucket of the incumbent's
profile is left to act on: every remedy tried, every search that could pay ended. From there on
the study has converged when

* the last ``after`` free trials all found nothing within noise of the best (each clearly slower,
  failed, pruned, or a configuration measured already), or
* ``2 * after`` free trials have run without one beating the best beyond noise (ties within noise
  keep coming, but none pays).

A free trial that beats its stage's incumbent beyond noise ends the free stage instead (the guide
starts again from the new incumbent's profile), so the counts restart there. Noise is
:func:`autotune.search.noise.margin` of the trial and the best.

A study left to end by itself (``autotune run`` with neither ``--trials`` nor ``--time-budget``)
also stops on a **plateau** (:func:`plateau`): once the search has found something better than
stock, it does not go on for longer without finding anything than it took to reach the best's level
(the first trial within noise of the best; a later best inside that noise found nothing). When one
more trial, as long as those since, would make the time spent since then longer than the time spent
up to it, the study has converged. Times are the trials' own spans added up, so a
pause between two runs of the command does not count, and several workers' trials add up.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import optuna

from autotune.search.noise import margin, within
from autotune.search.stage import Stage
from autotune.search.trials import (
    COST,
    DUPLICATE,
    QUEUED_AGAIN,
    REFERENCE,
    STOCK,
    best_trial,
    eligible,
    measurement_of,
    reason_of,
    span_s,
)

if TYPE_CHECKING:
    from autotune.search.guide import Guide
    from autotune.search.options import StudyOptions

_NOT_SEARCH = (DUPLICATE, COST, *QUEUED_AGAIN)
"""Failure reasons of trials whose time is not search time: not run, or run again in a queued copy."""

FREE_TRIALS = 2
"""Free trials that found nothing within noise of the best before a study stops (``--converge-after``)."""


PLATEAU_RATIO = 1.0
"""The time a study may go on without finding anything, as a multiple of the time it took to find the best."""


@dataclass(frozen=True)
class Convergence:
    """Why the study stopped by itself."""

    stage: int
    """The free stage whose trials found nothing."""
    trials: list[int]
    best_trial: int
    best_samples_per_s: float
    margin: float
    """The relative noise margin the free trials were judged with (of the best)."""
    reason: str
    kind: str = "free"
    """``free``: the free trials found nothing; ``plateau``: nothing found for as long as the best took."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def convergence(
    study: optuna.Study, stages: list[Stage], after: int = FREE_TRIALS
) -> Convergence | None:
    """The study's convergence, or None while it should go on (``after`` <= 0: never converges)."""
    if after <= 0 or not stages or stages[-1].kind != "free":
        return None
    stage = stages[-1]
    best = best_trial(study)
    trials = [study.trials[n] for n in stage.trials if n < len(study.trials)]
    if best is None or not trials:
        return None
    best_m = measurement_of(best)
    misses = 0
    for t in reversed(trials):
        if eligible(t) and within(
            float(t.value), float(best.value), margin(measurement_of(t), best_m)
        ):
            break
        misses += 1
    noise = margin(best_m, None)
    common = {
        "stage": stage.stage,
        "trials": [t.number for t in trials],
        "best_trial": best.number,
        "best_samples_per_s": float(best.value),
        "margin": noise,
    }
    if misses >= after:
        return Convergence(
            **common,
            reason=f"the last {misses} free trials found nothing within noise of the best "
            f"(#{best.number}, {best.value:.2f} samples/s, margin {100 * noise:.0f} %)",
        )
    if len(trials) >= 2 * after:
        return Convergence(
            **common,
            reason=f"{len(trials)} free trials, none beat the best (#{best.number}, "
            f"{best.value:.2f} samples/s) beyond noise",
        )
    return None


@dataclass(frozen=True)
class _Spans:
    """Where a study stands against the plateau rule: the trials up to the one that reached the best's
    level, and the trials since, with the seconds each side spent. A best that came later only tied that
    level (within noise), so its own time counts among the trials since: it found nothing beyond noise."""

    best: optuna.trial.FrozenTrial
    reached: optuna.trial.FrozenTrial
    """The first trial within noise of the best (the best itself where none came before it)."""
    after: list[optuna.trial.FrozenTrial]
    to_best_s: float
    since_s: float


def _spans(study: optuna.Study) -> _Spans | None:
    """None while stock (or a reference) is the best's level, or nothing is measured."""
    best = best_trial(study)
    if best is None:
        return None
    # A trial lost with its tuner (or cut by a stop) is measured again in its queued copy; its span
    # runs to whenever the study was next opened, which can be hours that searched nothing.
    done = [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state.is_finished() and reason_of(t) not in _NOT_SEARCH
    ]
    best_m = measurement_of(best)
    reached = next(
        t
        for t in done
        if t.number == best.number
        or (
            eligible(t)
            and within(float(t.value), float(best.value), margin(measurement_of(t), best_m))
        )
    )
    if reached.user_attrs.get(STOCK) or reached.user_attrs.get(REFERENCE):
        return None  # nothing found beyond noise of stock yet
    before = [t for t in done if t.number <= reached.number]
    after = [t for t in done if t.number > reached.number]
    return _Spans(
        best=best,
        reached=reached,
        after=after,
        to_best_s=sum(map(span_s, before)),
        since_s=sum(map(span_s, after)),
    )


def plateau(study: optuna.Study, stage: int, ratio: float = PLATEAU_RATIO) -> Convergence | None:
    """Convergence by time: the trials since the best reached its level (the first trial within noise of
    it) and one more of their typical length would outlast the trials up to it, ``ratio`` times over.

    None while stock is the best or within noise of it (references are never the best), while no trial ran after it,
    or ``ratio`` <= 0: a search that has found nothing yet is left to its stages.
    """
    spans = _spans(study) if ratio > 0 else None
    if spans is None or not spans.after:
        return None
    best, after, to_best, since = spans.best, spans.after, spans.to_best_s, spans.since_s
    typical = statistics.median(map(span_s, after))
    if since + typical < ratio * to_best:
        return None
    return Convergence(
        stage=stage,
        trials=[t.number for t in after],
        best_trial=best.number,
        best_samples_per_s=float(best.value),
        margin=margin(measurement_of(best), None),
        kind="plateau",
        reason=f"{len(after)} trial{'s' if len(after) > 1 else ''} in {since:.0f} s found nothing beyond noise of "
        f"{_level(spans)}; one more (~{typical:.0f} s) would search longer than finding it took",
    )


def _level(spans: _Spans) -> str:
    """The best, the trial that reached its level first where a later tie is the best, and when."""
    best = f"#{spans.best.number}, {spans.best.value:.2f} samples/s"
    first = spans.reached.number
    by = ", reached" if first == spans.best.number else f"; its level reached by #{first}"
    return f"the best ({best}{by} after {spans.to_best_s:.0f} s of trials)"


def plateau_left_s(study: optuna.Study, ratio: float = PLATEAU_RATIO) -> float | None:
    """The most search time the plateau rule leaves the study unless a trial beats the best (the trial
    that crosses the line may run past it); None while the rule is not armed (see :func:`plateau`)."""
    spans = _spans(study) if ratio > 0 else None
    return None if spans is None else max(0.0, ratio * spans.to_best_s - spans.since_s)


def study_convergence(study: optuna.Study, guide: Guide, opts: StudyOptions) -> Convergence | None:
    """Whether the study has converged (:func:`convergence`, :func:`plateau`); without guidance every
    search trial counts as a free one."""
    stages = guide.stages
    if not guide.enabled:
        searched = [
            t.number
            for t in study.get_trials(deepcopy=False)
            if t.state.is_finished()
            and not (t.user_attrs.get(STOCK) or t.user_attrs.get(REFERENCE))
        ]
        stages = [
            Stage(
                stage=0,
                bottleneck=None,
                share=None,
                groups=["all"],
                knobs=[],
                incumbent=0,
                incumbent_samples_per_s=0.0,
                profile=None,
                buckets=None,
                dominant=None,
                kind="free",
                trials=searched,
            )
        ]
    found = convergence(study, stages, opts.converge_after)
    if found is None and opts.plateau and opts.converge_after > 0:
        found = plateau(study, stages[-1].stage if stages else 0)
    return found
