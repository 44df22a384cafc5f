"""Which values a search stage may try for a knob, from the incumbent's: the ones that can win.

Some knobs are speed knobs in one direction only:

* **precision** (``precision.regions.R``, ``precision.default``, ``precision.frozen_dtype``): a lower
  precision can make a step faster (fp32 -> bf16, bf16 -> fp8), a higher one cannot; it is an
  accuracy knob upwards. On one H200 the three precision trials of a study (two fp32 regions, fp8
  DiT) recompiled and recaptured the step for 2:19, 2:34 and 4:34 minutes and were all pruned.
  A search stage tries only lower precisions, each region on its own, and the study checks loss
  parity before a lowered trial may become the incumbent (``autotune.search.vet``).
* **activation checkpointing** (``checkpointing.regions``): recomputing a region's forward costs
  time and saves memory; a search stage may only checkpoint fewer regions (the memory budget is
  the sampler's constraint, and the free stage may still trade speed for memory).
* **gradient accumulation** (``memory.accumulation_steps``): more, smaller micro-batches per update
  cost time and save memory; a search stage may only take fewer. Where stock does not fit the
  memory budget, the guide's memory stage (:mod:`autotune.search.guide`) moves the other way.

And a remedy the incumbent holds is kept by its searches: on H200 studies of ``full`` searching
away from fused AdamW (foreach, loop) never paid (six trials, each pruned or stopped). The free stage
(TPE over every knob) is not restricted by any of these.
"""

from __future__ import annotations

from typing import Any

from autotune.search.knobs import Knob

PRECISION_RANK = {"fp8": 0, "fp16": 1, "bf16": 1, "fp32": 2}
"""Lower is faster where it changes anything (fp16 and bf16 alike: a move between them is no lowering)."""
LOCAL = ("precision",)
"""Groups searched one knob at a time: each trial changes one of the incumbent's values."""


def _precision(knob: Knob, current: Any) -> bool:
    names = (*knob.choices, current)
    return knob.key.startswith("precision.") and all(
        isinstance(c, str) and c in PRECISION_RANK for c in names
    )


def search_choices(knob: Knob, current: Any) -> tuple[Any, ...] | None:
    """The values a search stage from an incumbent holding ``current`` (a config value) may give the
    knob, ``current`` first; None where any value of the knob's range may be sampled."""
    if knob.remedy is not None and current == knob.remedy:
        return (current,)
    if knob.type not in ("categorical", "bool"):
        return None
    if _precision(knob, current):
        lower = tuple(c for c in knob.choices if PRECISION_RANK[c] < PRECISION_RANK[current])
        return (current, *lower)
    if knob.key == "checkpointing.regions" and isinstance(current, list):
        fewer = tuple(c for c in knob.choices if set(c) < set(current))
        return (current, *fewer)
    if knob.key == "memory.accumulation_steps" and isinstance(current, int):
        return (current, *(c for c in knob.choices if c < current))
    return (current, *(c for c in knob.choices if c != current))


def raises_precision(knob: Knob, current: Any, value: Any) -> bool:
    """Whether ``value`` is a higher precision than ``current`` for this knob."""
    return (
        _precision(knob, current)
        and value in PRECISION_RANK
        and PRECISION_RANK[value] > PRECISION_RANK[current]
    )
