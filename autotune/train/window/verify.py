"""Loss parity: does a configuration train the same model as the stock configuration?

Both are trained from the same seed (same initial weights) on the same data for N steps after
their warm-up, each in fresh processes; the steps compared are the first ones both trained, warm-up
included (a run warms up at least one step, more to drain its loader's buffer, so with N asked
N + 1 or more are compared). Per-step values differ by the random draws (noise, flow-matching times,
dropout) whenever two configurations consume the generator differently (CUDA graphs, compiled
regions), so the verdict compares the window means of the loss and of the gradient norm:

    |mean(X) - mean(stock)| / mean(stock) <= TOLERANCE[precision]

and reports the largest per-step relative difference beside them. The tolerances are set by the
lowest precision X uses: fp32 2 %, bf16 and fp16 5 %, fp8 8 %. A configuration that stops part
of the model from training (e.g. freezes the DiT) changes the gradient norm far beyond them.

A mean outside its tolerance fails only where the window can tell it from the draws' noise: by
more than the 95 % confidence half-width of the mean per-step difference (Student's t on the
differences; the two runs see the same batches, so the pairs differ by the random draws and by
what the configuration changes). Otherwise the window is too short to judge (``decided`` False):
two draws of the same distribution, e.g. a compiled region drawing its noise from another
generator, can differ by more than 5 % over three steps. An undecided comparison is not a pass.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from autotune.config import TrainConfig
from autotune.errors import TrialError
from autotune.train.trial.launch import launch
from autotune.train.trial.record import TrialRecord
from autotune.workloads.stock import stock_like

TOLERANCE = {"fp32": 0.02, "bf16": 0.05, "fp16": 0.05, "fp8": 0.08}


def tolerance_for(cfg: TrainConfig) -> float:
    used = {cfg.precision.default, *cfg.precision.regions.values()}
    return max(TOLERANCE[p] for p in used)


@dataclass
class ParityResult:
    passed: bool
    tolerance: float
    loss_rel_diff: float
    grad_norm_rel_diff: float
    max_step_loss_rel_diff: float
    max_step_grad_norm_rel_diff: float
    steps: int
    """Training steps compared: each run's first ``steps``, its warm-up included (both runs start
    from the same weights on the same batches, so step i of one is step i of the other)."""
    decided: bool
    """False: a mean lies outside its tolerance by less than its noise margin (too few steps)."""
    loss_margin: float | None
    grad_norm_margin: float | None
    """The 95 % confidence half-width of the mean per-step difference, relative to stock's mean
    (None: one step, no spread to tell)."""
    stock_losses: list[float]
    losses: list[float]
    stock_grad_norms: list[float]
    grad_norms: list[float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


class Trained(Protocol):
    """What parity compares of a run (``autotune.train.trial.record.Measurement`` has both)."""

    losses: Sequence[float]
    grad_norms: Sequence[float]


T_975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
"""Student's t, two-sided 95 %, by degrees of freedom; beyond them the value at 10 (2.23) up to 29,
at 30 (2.04) up to 59, then 2.0: t falls with the degrees of freedom, so a margin is never
narrower than the exact one."""


def _t975(df: int) -> float:
    return T_975.get(df) or (2.23 if df < 30 else 2.04 if df < 60 else 2.0)


def _margin(ours: list[float], theirs: list[float]) -> float | None:
    """The 95 % confidence half-width of the mean per-step difference, relative to ``theirs``'."""
    if len(ours) < 2:
        return None
    diffs = [a - b for a, b in zip(ours, theirs)]
    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    return _t975(len(diffs) - 1) * se / max(abs(statistics.fmean(theirs)), 1e-12)


def compare(stock: Trained, other: Trained, tolerance: float) -> ParityResult:
    sl, ol = list(stock.losses), list(other.losses)
    sg, og = list(stock.grad_norms), list(other.grad_norms)
    n = min(len(sl), len(ol))
    loss_d = _rel(statistics.fmean(ol[:n]), statistics.fmean(sl[:n]))
    grad_d = _rel(statistics.fmean(og[:n]), statistics.fmean(sg[:n]))
    loss_m, grad_m = _margin(ol[:n], sl[:n]), _margin(og[:n], sg[:n])
    passed = loss_d <= tolerance and grad_d <= tolerance
    clearly_apart = any(
        m is not None and d - m > tolerance for d, m in ((loss_d, loss_m), (grad_d, grad_m))
    )
    return ParityResult(
        passed=passed,
        tolerance=tolerance,
        loss_rel_diff=loss_d,
        grad_norm_rel_diff=grad_d,
        max_step_loss_rel_diff=max(_rel(a, b) for a, b in zip(ol[:n], sl[:n])),
        max_step_grad_norm_rel_diff=max(_rel(a, b) for a, b in zip(og[:n], sg[:n])),
        steps=n,
        decided=passed or clearly_apart,
        loss_margin=loss_m,
        grad_norm_margin=grad_m,
        stock_losses=sl[:n],
        losses=ol[:n],
        stock_grad_norms=sg[:n],
        grad_norms=og[:n],
    )


def undecided_text(result: ParityResult) -> str:
    """Why ``result`` (not decided) neither passes nor fails, and what would decide it."""

    def part(name: str, diff: float, margin: float | None) -> str:
        noise = "no spread in one step" if margin is None else f"± {100 * margin:.2f}"
        return f"{name} {100 * diff:.2f} % ({noise})"

    return (
        f"{result.steps} step(s) too few to judge: "
        f"{part('loss', result.loss_rel_diff, result.loss_margin)}, "
        f"{part('gradient norm', result.grad_norm_rel_diff, result.grad_norm_margin)} against a "
        f"tolerance of {100 * result.tolerance:.0f} %; more steps (--steps) decide"
    )


def verify(
    cfg: TrainConfig,
    *,
    steps: int = 20,
    nproc: int = 1,
    timeout: float | None = None,
    stock: TrialRecord | None = None,
    source: str | None = None,
) -> ParityResult:
    """Train the stock configuration (unless its record is given) and ``cfg``; compare them.
    ``source``: the file ``cfg`` was read from, which the failure of a check of its values names
    (the stock configuration's too: it takes ``cfg``'s workload, preset, data and model)."""
    run = functools.partial(
        launch, steps=steps, warmup=0, nproc=nproc, timeout=timeout, source=source
    )
    if stock is None:
        stock = run(stock_like(cfg))
    other = run(cfg)
    for name, record in (("stock", stock), ("candidate", other)):
        if record.failure is not None:
            raise TrialError(
                f"verify: the {name} configuration failed: {record.failure.error}",
                record.failure.reason,
            )
    assert stock.measurement is not None and other.measurement is not None
    return compare(stock.measurement, other.measurement, tolerance_for(cfg))
