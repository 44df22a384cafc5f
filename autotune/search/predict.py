"""A configuration's peak memory predicted before it runs, from the peaks its study measured.

peak = static + rest. ``static`` is what the configuration holds whatever its batch: weights,
gradients and optimizer state, counted on the meta device (:mod:`autotune.search.static_bytes`).
``rest`` (activations, the allocator's and the runtime's own memory) is learnt from the trials that
ran: each one's measured peak less its static bytes, at its micro-batch (``batch_size /
memory.accumulation_steps``). Trials are comparable when their configurations are equal but for
what the static count models and the micro-batch (:func:`family`: checkpointing, precision map,
compile, graphs, kernels all differ a family). Within a family:

* two micro-batches measured or more: ``rest = base + per_sample x micro-batch``, a least-squares
  line (``per_sample`` >= 0);
* one: the line through it and the study's ``base`` (the median intercept of the families fitted
  so; with none, only its own micro-batch is predicted);
* and in every case at least the largest rest measured at a micro-batch no larger (more samples
  never hold less): where no line exists this lower bound alone is the prediction (``at_least``).

Where nothing gives an estimate (a family nothing was measured in, a smaller micro-batch than any
measured) the prediction is the static bytes alone, a lower bound: a step holds its weights,
gradients and optimizer state whatever else it needs. An out-of-memory trial's peak counts where it
was measured to its end (over the budget: the CPU's check after the measured window); a peak at or
under the budget is where CUDA's allocator refused an allocation, below what the run needed, and
serves as a lower bound only (its rest at least zero: the allocation may have been refused before
all of the static bytes were held).

A trial is not run where its prediction exceeds the budget by more than :data:`MARGIN`.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial

from autotune.config import TrainConfig
from autotune.config._strict import to_dict
from autotune.search.static_bytes import static_bytes
from autotune.search.trials import PREDICTED, PREDICTED_OOM, record_of

MARGIN = 1.05
"""A trial is skipped only when predicted over 1.05 x the budget: a prediction within 5 % of the
budget is inside what the model does not see (allocator fragmentation, the runtime's own memory
varying from run to run), and such a configuration is worth measuring."""
STATIC_ONLY = ("optimizer", "memory.expandable_segments", "memory.accumulation_steps", "data")
STATIC_ONLY_PRECISION = ("frozen_dtype", "trainable_dtype", "tf32")
"""Keys a family ignores: the static count models them (optimizer, storage dtypes), the micro-batch
is the model's variable, or they do not touch device memory of the step (the loader, TF32)."""
GiB = 2**30


@dataclass(frozen=True)
class Observed:
    """One trial's peak at its micro-batch, less its static bytes."""

    trial: int
    micro_batch: int
    rest: int
    exact: bool
    """False: a lower bound (the peak where CUDA refused an allocation)."""


@dataclass(frozen=True)
class Prediction:
    peak_bytes: int
    static_bytes: int
    basis: str
    at_least: bool = False
    """Only a lower bound (no line through the family's measurements)."""

    def to_dict(self) -> dict:
        return {
            "peak_bytes": self.peak_bytes,
            "static_bytes": self.static_bytes,
            "basis": self.basis,
            "at_least": self.at_least,
        }


def family(cfg: TrainConfig) -> str:
    """The configuration without the keys the model accounts for (:data:`STATIC_ONLY`)."""
    data = to_dict(cfg)
    for key in STATIC_ONLY:
        head, _, tail = key.partition(".")
        if tail:
            data.get(head, {}).pop(tail, None)
        else:
            data.pop(head, None)
    for key in STATIC_ONLY_PRECISION:
        data.get("precision", {}).pop(key, None)
    return json.dumps(data, sort_keys=True, default=str)


def micro_batch(cfg: TrainConfig) -> int:
    return max(1, cfg.batch_size // cfg.memory.accumulation_steps)


def observed_peak(trial: FrozenTrial) -> tuple[int, bool] | None:
    """The trial's peak as the study reports it and whether it is exact (see the module docstring);
    None for a trial that did not run to a peak (a skipped one, a crash)."""
    record = record_of(trial)
    if record is None:
        return None
    if record.measurement is not None and record.failure is None:
        return record.measurement.memory.allocated_bytes, True
    f = record.failure
    if f is not None and f.reason == "oom" and f.peak_bytes:
        return f.peak_bytes, f.budget_bytes is not None and f.peak_bytes > f.budget_bytes
    return None


def observations(
    study: optuna.Study, config_of: Callable[[FrozenTrial], TrainConfig]
) -> dict[str, list[Observed]]:
    """The study's peaks by family."""
    out: dict[str, list[Observed]] = {}
    for t in study.get_trials(deepcopy=False):
        peak = observed_peak(t) if t.state.is_finished() else None
        if peak is None:
            continue
        cfg = config_of(t)
        rest = peak[0] - static_bytes(cfg)
        seen = Observed(t.number, micro_batch(cfg), rest if peak[1] else max(0, rest), peak[1])
        out.setdefault(family(cfg), []).append(seen)
    return out


def _line(points: list[Observed]) -> tuple[float, float] | None:
    """(base, per_sample) of the least-squares line through the exact points (two micro-batches at least)."""
    exact = [p for p in points if p.exact]
    if len({p.micro_batch for p in exact}) < 2:
        return None
    ms = [p.micro_batch for p in exact]
    rs = [p.rest for p in exact]
    mean_m, mean_r = statistics.fmean(ms), statistics.fmean(rs)
    var = sum((m - mean_m) ** 2 for m in ms)
    slope = max(0.0, sum((m - mean_m) * (r - mean_r) for m, r in zip(ms, rs)) / var)
    return mean_r - slope * mean_m, slope


def predict(cfg: TrainConfig, seen: dict[str, list[Observed]]) -> Prediction:
    """``cfg``'s peak from the study's observations (see the module docstring)."""
    points = seen.get(family(cfg), [])
    m = micro_batch(cfg)
    static = static_bytes(cfg)
    lines = [ln for ln in (_line(ps) for ps in seen.values()) if ln is not None]
    own = _line(points)
    estimate, basis = None, ""
    if own is not None:
        estimate = own[0] + own[1] * m
        basis = f"line through {len(points)} trial(s) of its family"
    else:
        exact = [p for p in points if p.exact]
        if exact:
            anchor = max(exact, key=lambda p: (-abs(p.micro_batch - m), p.rest))
            if anchor.micro_batch == m:
                estimate, basis = anchor.rest, f"trial #{anchor.trial}'s micro-batch"
            elif lines:
                base = statistics.median(b for b, _ in lines)
                slope = max(0.0, (anchor.rest - base) / anchor.micro_batch)
                estimate = anchor.rest + slope * (m - anchor.micro_batch)
                basis = f"trial #{anchor.trial} scaled by micro-batch over the study's base"
    below = [p for p in points if p.micro_batch <= m]
    floor = max(below, key=lambda p: p.rest) if below else None
    if estimate is None and floor is None:
        return Prediction(static, static, "its static bytes", True)
    if estimate is None or (floor is not None and floor.rest > estimate):
        assert floor is not None
        at_least = estimate is None
        return Prediction(
            int(static + floor.rest),
            static,
            f"at least trial #{floor.trial}'s (micro-batch {floor.micro_batch} <= {m})",
            at_least,
        )
    return Prediction(int(static + max(0.0, estimate)), static, basis)


def predicted_of(
    cfg: TrainConfig, study: optuna.Study, config_of: Callable[[FrozenTrial], TrainConfig]
) -> Prediction:
    """:func:`predict` from the study's finished trials."""
    return predict(cfg, observations(study, config_of))


def too_large(pred: Prediction | None, budget: int) -> str | None:
    """Why a trial predicted at ``pred`` is not run (None: it may fit)."""
    if pred is None or pred.peak_bytes <= MARGIN * budget:
        return None
    return (
        f"not run: predicted peak {'>= ' if pred.at_least else ''}{pred.peak_bytes / GiB:.2f} GiB "
        f"({pred.basis}; static {pred.static_bytes / GiB:.2f} GiB) over {MARGIN:g} x the memory "
        f"budget {budget / GiB:.2f} GiB"
    )


def accuracy(study: optuna.Study) -> dict:
    """Predicted against measured peak of every trial that ran with a prediction, and the errors
    (``(predicted - measured) / measured``) for ``diagnosis.json`` and the report. A prediction
    that is a lower bound only (``at_least``: whether it held is what it says) is left out of the
    error figures, and so is a peak where CUDA refused an allocation (it is below what the run
    needed)."""
    rows, skipped = [], []
    for t in study.get_trials(deepcopy=False):
        pred = t.user_attrs.get(PREDICTED)
        if not isinstance(pred, dict) or not t.state.is_finished():
            continue
        record = record_of(t)
        failure = record.failure if record is not None else None
        if failure is not None and failure.reason == PREDICTED_OOM:
            skipped.append({"trial": t.number, **pred, "budget_bytes": failure.budget_bytes})
            continue
        peak = observed_peak(t)
        if peak is None:
            continue
        error = (pred["peak_bytes"] - peak[0]) / peak[0]
        rows.append(
            {"trial": t.number, "predicted_bytes": pred["peak_bytes"], "measured_bytes": peak[0],
             "exact": peak[1], "error": error, "at_least": bool(pred.get("at_least"))}
        )  # fmt: skip
    errors = [abs(r["error"]) for r in rows if r["exact"] and not r["at_least"]]
    return {
        "margin": MARGIN,
        "trials": rows,
        "skipped": skipped,
        "median_abs_error": statistics.median(errors) if errors else None,
        "max_abs_error": max(errors) if errors else None,
    }
