"""What autotune's own AdamW implementations share: the clipping happens inside their step."""

from __future__ import annotations

from collections.abc import Callable

import torch


class ClipsInStep:
    """Mixin of an optimizer whose ``step(max_norm=...)`` computes the gradient norm, clips by it as
    it updates, and keeps the norm (before clipping) in ``last_norm``."""

    last_norm: torch.Tensor | None = None

    def clip_and_step(self, max_norm: float) -> torch.Tensor:
        """Through ``step`` so that its hooks (the schedule's counter, the profiler's label) see it."""
        self.step(max_norm=max_norm)
        return self.last_norm


def run_closure(closure: Callable[[], torch.Tensor] | None) -> torch.Tensor | None:
    """``closure()``'s loss with gradients enabled (an optimizer's step runs under no_grad), or None."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()
