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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import optuna

from autotune.search.guide import Stage
from autotune.search.noise import margin, within
from autotune.search.trials import best_trial, eligible, measurement_of

FREE_TRIALS = 2
"""Free trials that found nothing within noise of the best before a study stops (``--converge-after``)."""


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def convergence(study: optuna.Study, stages: list[Stage], after: int = FREE_TRIALS) -> Convergence | None:
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
        if eligible(t) and within(float(t.value), float(best.value), margin(measurement_of(t), best_m)):
            break
        misses += 1
    noise = margin(best_m, None)
    common = {"stage": stage.stage, "trials": [t.number for t in trials], "best_trial": best.number,
              "best_samples_per_s": float(best.value), "margin": noise}
    if misses >= after:
        return Convergence(**common, reason=f"the last {misses} free trials found nothing within noise of the best "
                                            f"(#{best.number}, {best.value:.2f} samples/s, margin {100 * noise:.0f} %)")
    if len(trials) >= 2 * after:
        return Convergence(**common, reason=f"{len(trials)} free trials, none beat the best (#{best.number}, "
                                            f"{best.value:.2f} samples/s) beyond noise")
    return None
