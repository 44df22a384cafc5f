"""Before a measured trial may lead the search: loss parity with stock, and a second run where it was noisy.

* **Parity.** Every trial trains from the same seed on the same batches as the stock trial, so
  its losses can be compared with stock's as they are (:func:`autotune.train.window.verify.compare`, at
  the tolerance of the lowest precision it uses). A trial that fails is kept, with its result in
  ``PARITY``, and is never the incumbent nor the best: a lower precision that changes what the
  model learns is not a speed-up (``autotune.search.directions`` lowers precisions only).
* **Noise.** A search trial whose measurement is flagged (:func:`autotune.search.noise.flags`: a
  wide step-time spread, or a busy host at its start) and that would become the best is run once
  more in fresh processes; its value is then the lower of the two runs. Where that second run
  fails, the trial is ``NOISY``: never the best. A flagged trial that would not lead is only marked.
"""

from __future__ import annotations

from typing import Any

import optuna

from autotune.config import TrainConfig
from autotune.search.noise import flags
from autotune.search.trials import best_trial, measurement_of, stock_trial
from autotune.train.trial.record import TrialRecord


def parity_with_stock(
    study: optuna.Study, record: TrialRecord, cfg: TrainConfig
) -> dict[str, Any] | None:
    """Loss parity of the record against the stock trial's losses (None: either has none)."""
    from autotune.train.window.verify import compare, tolerance_for

    stock = stock_trial(study)
    stock_m = measurement_of(stock) if stock is not None else None
    m = record.measurement
    if stock_m is None or m is None or not stock_m.losses or not m.losses:
        return None
    result = compare(stock_m, m, tolerance_for(cfg))
    return {
        "passed": result.passed,
        "tolerance": result.tolerance,
        "loss_rel_diff": result.loss_rel_diff,
        "grad_norm_rel_diff": result.grad_norm_rel_diff,
        "steps": result.steps,
        "stock_trial": stock.number,
    }


def needs_second_run(study: optuna.Study, record: TrialRecord) -> bool:
    """A flagged measurement that would make the trial the study's best."""
    if record.measurement is None or not flags(record):
        return False
    best = best_trial(study)  # none yet (stock out of memory): the first that fits would be it
    return best is None or record.measurement.samples_per_s > float(best.value)


def settled(record: TrialRecord) -> bool:
    """Not flagged, or measured again (``record.remeasure`` holds a measurement)."""
    return not flags(record) or (
        record.remeasure is not None and record.remeasure.measurement is not None
    )
