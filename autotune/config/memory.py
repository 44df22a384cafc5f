"""The knobs that trade speed for device memory through the CUDA caching allocator.

Applied by the launchers, as environment variables of the training processes
(:meth:`MemoryConfig.environment`): the allocator reads them when CUDA starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autotune.config.knob import NotCarried, Search, knob, validate

ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


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
