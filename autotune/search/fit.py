"""Memory as a bottleneck: when the stock configuration does not fit the memory budget.

A study whose stock trial ran out of memory (under ``--memory-budget`` or ``--gpu``, or measured
over the budget) has no incumbent to profile: no time bucket can say what to do. The guide then
runs a ``memory`` stage (:class:`autotune.search.guide.Guide`): one trial per rung of
:func:`ladder`, stock with the memory knobs set to values that lower its peak, cheapest first,
until a trial fits; that trial is the incumbent the usual stages continue from.

The rungs, cheapest first: the caching allocator's expandable segments (no cost in the step);
then each more micro-batches per update (``memory.accumulation_steps``: smaller kernels, the
same samples per update), and after the first of them, the largest choice of activation
checkpointing (recomputing the trainable regions' forward, about a third more of their work; one
block in two first where the space offers ``checkpointing.every``, half that) with each
accumulation again. Rungs are cumulative: a later one keeps the earlier's knobs.

Then the optimizer's state, whose size no batch remedy touches (full GR00T N1.6: 1.62 B trainable
parameters, 13 GB of fp32 moments beside 13 GB of fp32 weights and gradients, more than a 24 GiB
card holds whatever the batch). Each state tier runs the rungs above again from none:

1. the exact rungs above, with AdamW's fp32 moments;
2. ``optimizer.impl: adamw8bit`` (2 bytes a parameter instead of 8; the update only, one compiled
   kernel a parameter: a small share of the step), then ``adamw4bit`` (1 byte). They come after
   every exact rung because they change what is computed: loss parity with stock decides, and a
   failed parity is a trial spent (the study goes on to the next rung);
3. ``optimizer.offload`` (no state on the device, with the fused AdamW it steps on the host):
   last, as every step moves each gradient and parameter over the host link and runs AdamW on
   the host's cores, several times the update's device time for a model of this size.
"""

from __future__ import annotations

from typing import Any

from optuna.trial import FrozenTrial

from autotune.search.knobs import Knob, SearchSpace
from autotune.search.trials import (
    PREDICTED_OOM,
    constraint_of,
    measurement_of,
    reason_of,
    record_of,
)

EXPANDABLE = "memory.expandable_segments"
ACCUMULATION = "memory.accumulation_steps"
CHECKPOINTING = "checkpointing.regions"
EVERY = "checkpointing.every"
IMPL = "optimizer.impl"
OFFLOAD = "optimizer.offload"
LOW_BIT = ("adamw8bit", "adamw4bit")
GRAPHS = "graphs.mode"
LADDER_KEYS = (EXPANDABLE, ACCUMULATION, CHECKPOINTING, EVERY, IMPL, OFFLOAD)
"""The knobs the rungs set."""


def out_of_memory(trial: FrozenTrial) -> bool:
    """The trial ran out of memory, or measured a peak over the budget."""
    if reason_of(trial) == "oom":
        return True
    return measurement_of(trial) is not None and constraint_of(trial)[0] > 0


def ladder(space: SearchSpace, stock: dict[str, Any], batch_size: int) -> list[dict[str, Any]]:
    """Optuna parameters of each rung (see the module docstring) over ``stock``'s, in order;
    accumulation steps that do not divide ``batch_size`` are left out."""
    knobs = {k.key: k for k in space.knobs}
    base = dict(stock)
    if EXPANDABLE in knobs and True in knobs[EXPANDABLE].choices:
        base[EXPANDABLE] = knobs[EXPANDABLE].encode(True)
    batch = _batch_rungs(knobs, stock, batch_size)
    rungs = [{**base, **tier, **rung} for tier in _state_tiers(knobs, stock) for rung in batch]
    unique: list[dict[str, Any]] = []
    for rung in (active_params(space, r) for r in rungs):
        if rung != active_params(space, stock) and rung not in unique:
            unique.append(rung)
    return unique


def _batch_rungs(knobs: dict[str, Knob], stock: dict[str, Any], batch_size: int) -> list[dict]:
    """The activation rungs over the base, the base itself ({}) first."""
    rungs: list[dict[str, Any]] = [{}]
    steps = _more_steps(knobs.get(ACCUMULATION), stock.get(ACCUMULATION, 1), batch_size)
    widest = _widest(knobs.get(CHECKPOINTING), stock.get(CHECKPOINTING))
    first_checkpointing = _checkpointing_rungs(knobs, widest)
    for i, k in enumerate(steps):
        rungs.append({ACCUMULATION: k})
        if i == 0:
            rungs += first_checkpointing
        if widest is not None:
            rungs.append({CHECKPOINTING: widest, ACCUMULATION: k})
    if not steps:
        rungs += first_checkpointing
    return rungs


def _checkpointing_rungs(knobs: dict[str, Knob], widest: Any) -> list[dict[str, Any]]:
    """The widest checkpointing alone: every other block first where the space offers it (half the
    recomputation), then every block."""
    if widest is None:
        return []
    every = knobs.get(EVERY)
    half = every is not None and 2 in every.choices
    return [
        *([{CHECKPOINTING: widest, EVERY: every.encode(2)}] if half else []),
        {CHECKPOINTING: widest},
    ]


def _state_tiers(knobs: dict[str, Knob], stock: dict[str, Any]) -> list[dict[str, Any]]:
    """The optimizer-state settings, stock's ({}) first, that the space offers beside stock's
    graphs (the host's update does not run in a captured whole step)."""
    tiers: list[dict[str, Any]] = [{}]
    impl = knobs.get(IMPL)
    if impl is None:
        return tiers
    graphs = knobs.get(GRAPHS)
    captured = graphs is not None and GRAPHS in stock and graphs.decode(stock[GRAPHS]) == "step"
    current = impl.decode(stock[IMPL]) if IMPL in stock else None
    tiers += [{IMPL: impl.encode(c)} for c in LOW_BIT if c in impl.choices and c != current]
    offload = knobs.get(OFFLOAD)
    if not captured and offload is not None and True in offload.choices and "fused" in impl.choices:
        tiers.append({IMPL: impl.encode("fused"), OFFLOAD: offload.encode(True)})
    return tiers


def active_params(space: SearchSpace, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` without the knobs that do not exist beside the others (what a trial records)."""
    values: dict[str, Any] = {}
    out: dict[str, Any] = {}
    for knob in space.knobs:
        if knob.key in params and knob.active(values):
            values[knob.key] = knob.decode(params[knob.key])
            out[knob.key] = params[knob.key]
    return out


def _more_steps(knob: Knob | None, current: int, batch_size: int) -> list[int]:
    if knob is None:
        return []
    return [c for c in knob.choices if c > current and batch_size % c == 0]


def _widest(knob: Knob | None, current: Any) -> Any:
    """The encoded checkpointing choice of the most regions, where it checkpoints more than stock."""
    if knob is None or not knob.choices:
        return None
    widest = max(knob.choices, key=len)
    have = knob.decode(current) if current is not None else []
    return knob.encode(widest) if set(widest) > set(have) else None


def peak_line(trial: FrozenTrial, budget: int | None) -> dict[str, Any]:
    """The trial's peak against the budget, for the report and ``diagnosis.json``."""
    record = record_of(trial)
    peak = None
    if record is not None and record.failure is not None:
        peak = record.failure.peak_bytes
        budget = record.failure.budget_bytes or budget
    elif record is not None and record.measurement is not None:
        peak = record.measurement.memory.allocated_bytes
    fits = None if peak is None or budget is None else peak <= budget
    if reason_of(trial) in ("oom", PREDICTED_OOM):
        fits = False
    line = {"trial": trial.number, "peak_bytes": peak, "budget_bytes": budget, "fits": fits}
    if reason_of(trial) == PREDICTED_OOM:  # not run: its peak is the prediction's
        line["predicted"] = True
    return line
