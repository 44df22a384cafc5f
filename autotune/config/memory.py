"""The knobs that trade speed for device memory: the CUDA caching allocator's settings and
gradient accumulation.

``expandable_segments`` is applied by the launchers, as environment variables of the training
processes (:meth:`MemoryConfig.environment`): the allocator reads them when CUDA starts.
``accumulation_steps`` is applied by ``autotune.train.session`` (each update runs that many
micro-batches of the configuration's batch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autotune.config._strict import FieldError
from autotune.config.knob import Carried, NotCarried, Search, knob, validate

ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
ACCUMULATION_CHOICES = (1, 2, 4, 8, 16)
SHOWN_DIVISORS = 1024
"""An error lists the divisors of batch_size up to this."""


def micro_batch_size(batch_size: int, steps: int) -> int:
    """Samples per micro-batch when ``steps`` micro-batches make one update of ``batch_size``;
    a FieldError (``memory.accumulation_steps``) unless ``steps`` divides ``batch_size``."""
    if batch_size % steps:
        # the small divisors only: listing them all costs a pass over batch_size (2**63 of them)
        small = [d for d in range(1, min(batch_size, SHOWN_DIVISORS) + 1) if batch_size % d == 0]
        shown = str(small) if batch_size <= SHOWN_DIVISORS else f"{str(small)[:-1]}, ...]"
        raise FieldError(
            "memory.accumulation_steps",
            steps,
            f"a divisor of batch_size {batch_size}: {shown}",
            f"does not divide batch_size {batch_size}",
        )
    return batch_size // steps


@dataclass
class MemoryConfig:
    """Caching-allocator settings. Applied through the environment (:meth:`environment`)."""

    expandable_segments: bool = knob(
        False,
        group="memory",
        search=Search("bool", needs="cuda"),
        hf=NotCarried(f"set {ALLOC_CONF}=expandable_segments:True in the environment instead"),
    )
    """Let the caching allocator grow a segment in place instead of reserving new ones
    (``expandable_segments:True``): less memory lost to fragmentation when batch shapes or
    activation sizes vary, at the cost of mapping calls as it grows. No effect on a CPU."""

    accumulation_steps: int = knob(
        1,
        group="memory",
        low=1,
        integer=True,
        search=Search(
            "categorical",
            choices=ACCUMULATION_CHOICES,
            # several ranks all-reduce from a captured backward's hooks, once per backward
            when_several_ranks={"graphs.mode": ["none", "regions"]},
        ),
        hf=Carried("gradient_accumulation_steps", to=lambda v, c: v if v > 1 else None),
    )
    """Micro-batches per optimizer update: each update runs this many forward and backward passes
    of ``batch_size / accumulation_steps`` samples, their gradients summed with each loss divided by
    this number, so the update is the one of the whole batch (exactly so for a loss that is a mean
    over samples) while activations are held for one micro-batch only. ``batch_size`` stays the
    samples per process per update; the learning-rate schedule advances once per update."""

    def __post_init__(self) -> None:
        validate(self)

    def environment(self, current: Mapping[str, str]) -> dict[str, str]:
        """The variables to set over ``current``: the allocator's options with these choices added
        to any the user set (a setting the user gave for the same option is kept)."""
        if not self.expandable_segments:
            return {}
        given = [o for o in current.get(ALLOC_CONF, "").split(",") if o.strip()]
        if any(o.split(":")[0].strip() == "expandable_segments" for o in given):
            return {}
        return {ALLOC_CONF: ",".join([*given, "expandable_segments:True"])}
