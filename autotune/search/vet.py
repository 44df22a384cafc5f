"""Before a measured trial may lead the search: loss parity with stock, and a second run where it was noisy.

* **Parity.** Every trial trains from the same seed on the same batches as the stock trial, so
  its losses can be compared with a reference's as they are (:func:`autotune.train.window.verify.compare`,
  at the tolerance of the lowest precision it uses). A trial that fails is kept, with its result in
  ``PARITY``, and is never the incumbent nor the best: a lower precision that changes what the
  model learns is not a speed-up (``autotune.search.directions`` lowers precisions only).
* **The reference** (:func:`parity_reference`) is stock's computation, the first of these that
  holds losses:

  1. the stock trial's own losses: measured, or trained to its end over the memory budget (on a
     CPU the peak is checked after the run, and the failure keeps its losses);
  2. stock run once more with the memory cap lifted (:func:`uncapped_run`), where stock ran out of
     memory under a budget below the device's own memory: its losses only, never a candidate,
     nor a speed (``UNCAPPED`` on the stock trial);
  3. where the device itself cannot hold stock: the first trial that fits and computes what stock
     does (no knob at a value with ``numerics``, :attr:`autotune.config.knob.KnobSpec.numerics`).

  Until one exists, a trial that changes what is computed (low-bit optimizer states, fp8) has
  no reference: its ``PARITY`` says ``no reference yet`` and it is never the incumbent nor the
  best (the memory ladder goes on to the exact rungs); once a reference exists such a trial
  that was faster than the best is queued again (:func:`rechecks`), to be compared with it.
* **Noise.** A search trial whose measurement is flagged (:func:`autotune.search.noise.flags`: a
  wide step-time spread, or a busy host at its start) and that would become the best is run once
  more in fresh processes; its value is then the lower of the two runs. Where that second run
  fails, the trial is ``NOISY``: never the best. A flagged trial that would not lead is only marked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.config import TrainConfig
from autotune.config.compat import Machine
from autotune.config.knob import numerics_of, walk
from autotune.search.noise import flags
from autotune.search.trials import (
    RECHECK_OF,
    UNCAPPED,
    best_trial,
    feasible,
    measurement_of,
    parity_pending,
    record_of,
    stock_trial,
)
from autotune.train.trial.record import TrialRecord

NO_REFERENCE = "no reference yet"


@dataclass(frozen=True)
class Reference:
    """Losses a trial's are compared with, and whose they are."""

    kind: str
    """``stock`` (its trial's losses), ``uncapped`` (stock run without the memory cap) or ``exact``
    (the first trial that fits and computes what stock does)."""
    trial: int
    losses: list[float]
    grad_norms: list[float]
    budget_bytes: int | None = None
    """The budget stock did not fit (None: it fitted, or the budget is unknown)."""

    def text(self) -> str:
        """How the report and ``diagnosis.json`` name it."""
        size = f"{self.budget_bytes / 2**30:.3g} GiB" if self.budget_bytes else "the budget"
        if self.kind == "uncapped":
            return f"stock without the memory cap (it does not fit {size})"
        if self.kind == "exact":
            return (
                f"trial #{self.trial}, the first configuration that fits and computes what stock "
                f"does (stock does not fit {size} and no run of it gave losses)"
            )
        if self.budget_bytes:  # a CPU's budget is checked after the run: stock trained to its end
            return f"stock (trial #{self.trial}, trained to its end over {size})"
        return f"stock (trial #{self.trial})"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "trial": self.trial, "text": self.text()}


def changes_numerics(params: dict[str, Any]) -> dict[str, Any]:
    """The trial parameters at a value that changes what is computed (by the knob's declaration;
    ``precision.regions.R`` by ``precision.regions``'s)."""
    specs = {d.key: d.spec for d in walk(TrainConfig)}
    out = {}
    for key, value in params.items():
        spec = specs.get(key) or specs.get(key.rsplit(".", 1)[0])
        if spec is not None and spec.changes_numerics(value):
            out[key] = value
    return out


def parity_reference(study: optuna.Study) -> Reference | None:
    """The losses trials are compared with (the module docstring's order); None: none yet."""
    stock = stock_trial(study)
    record = record_of(stock) if stock is not None else None
    if stock is None or record is None:
        return None
    m, failure = record.measurement, record.failure
    if m is not None and m.losses:
        return Reference("stock", stock.number, m.losses, m.grad_norms)
    budget = failure.budget_bytes if failure is not None else None
    if failure is not None and failure.losses and failure.grad_norms:
        return Reference("stock", stock.number, failure.losses, failure.grad_norms, budget)
    uncapped = stock.user_attrs.get(UNCAPPED)
    if isinstance(uncapped, dict) and uncapped.get("losses"):
        losses, norms = uncapped["losses"], uncapped["grad_norms"]
        return Reference("uncapped", stock.number, losses, norms, budget)
    for t in study.get_trials(deepcopy=False):
        tm = measurement_of(t) if feasible(t) else None
        if tm is not None and tm.losses and not changes_numerics(t.params):
            return Reference("exact", t.number, tm.losses, tm.grad_norms, budget)
    return None


def parity_with_stock(
    study: optuna.Study, record: TrialRecord, cfg: TrainConfig
) -> dict[str, Any] | None:
    """Loss parity of the record against the study's reference (:func:`parity_reference`); None:
    the record has no losses, or neither a reference nor a change of what is computed exists."""
    from autotune.train.window.verify import compare, tolerance_for, undecided_text

    m = record.measurement
    if m is None or not m.losses:
        return None
    ref = parity_reference(study)
    if ref is None:
        changed = numerics_of(TrainConfig, cfg)
        return {"passed": None, "note": NO_REFERENCE, "numerics": changed} if changed else None
    result = compare(ref, m, tolerance_for(cfg))
    parity = {
        "passed": result.passed if result.decided else None,
        "tolerance": result.tolerance,
        "loss_rel_diff": result.loss_rel_diff,
        "grad_norm_rel_diff": result.grad_norm_rel_diff,
        "steps": result.steps,
        "reference": ref.to_dict(),
    }
    if not result.decided:  # neither passed nor failed: never the best, and the record says why
        parity.update(undecided=True, note=undecided_text(result))
    if ref.kind != "exact":
        parity["stock_trial"] = ref.trial
    return parity


def needs_uncapped(record: TrialRecord, cap: int | None, machine: Machine) -> bool:
    """Stock ran out of memory, without losses, under a cap (``cap``: its bytes, None: no cap)
    below the device's own memory (an emulated budget): a run without it may give the
    reference's losses."""
    failure = record.failure
    if failure is None or failure.reason != "oom" or failure.losses or cap is None:
        return False
    return bool(machine.cuda and machine.device_bytes and cap < machine.device_bytes)


def uncapped_run(
    cfg: TrainConfig, *, steps: int, warmup: int, nproc: int, timeout: float, log_path: Path, env
) -> dict[str, Any]:
    """Stock run once more without the memory cap (``env`` lacks it), for its losses only; what
    ``UNCAPPED`` on the stock trial holds: its losses and gradient norms, or why it gave none."""
    from autotune.train.trial.launch import launch

    record = launch(
        cfg,
        steps=steps,
        warmup=warmup,
        nproc=nproc,
        timeout=timeout,
        log_path=log_path,
        extra_env=env,
    )
    m = record.measurement
    if m is None or not m.losses:
        reason = record.failure.reason if record.failure is not None else "no losses"
        return {"error": record.failure.error if record.failure else reason, "reason": reason}
    return {"losses": m.losses, "grad_norms": m.grad_norms}


def rechecks(study: optuna.Study) -> list[FrozenTrial]:
    """Trials measured without a reference (``no reference yet``) that were faster than the best,
    once a reference exists and none was queued again for them: to run again and be compared."""
    best = best_trial(study)
    if best is None or parity_reference(study) is None:
        return []
    trials = study.get_trials(deepcopy=False)
    asked = {t.user_attrs.get(RECHECK_OF) for t in trials}
    return [
        t
        for t in trials
        if parity_pending(t) and t.number not in asked and float(t.value) > float(best.value)
    ]


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
