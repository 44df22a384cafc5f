"""AdamW with quantized moments: ``optimizer.impl: adamw8bit`` and ``adamw4bit``.

torchao's ``AdamW8bit`` and ``AdamW4bit`` (``torchao.optim``) keep both moments block-wise
quantized (8 bits a value and an fp32 scale per 256 values; 4 bits and one per 128) and update each
parameter with one function compiled by ``torch.compile``: the update is computed in fp32 from the
dequantized moments, which are quantized again. Not the same numbers as fp32 moments, so the study's
loss parity decides (the knob's ``numerics``).

On a CPU the update runs eagerly (``torch.compiler.set_stance("force_eager")``): torchao compiles
it once per parameter shape, which with inductor's C++ backend costs seconds a shape, more than the
steps of the small models a CPU trains; the update is the same function.
"""

from __future__ import annotations

import torch

LOW_BIT_CLASSES = ("AdamW8bit", "AdamW4bit")


def _eager_on_cpu(base: type) -> type:
    """``base`` whose step runs its compiled update eagerly when the parameters are on a CPU."""

    class EagerOnCpu(base):
        def step(self, closure=None):
            first = self.param_groups[0]["params"][0]
            if first.device.type != "cpu":
                return super().step(closure)
            with torch.compiler.set_stance("force_eager"):
                return super().step(closure)

    EagerOnCpu.__name__ = EagerOnCpu.__qualname__ = base.__name__
    return EagerOnCpu


def low_bit_adamw(
    param_groups: list[dict],
    impl: str,
    *,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float = 0.0,
) -> torch.optim.Optimizer:
    """torchao's AdamW of ``impl`` (``adamw8bit`` or ``adamw4bit``) over ``param_groups`` (each group's
    weight decay kept); its learning rates are CPU tensors, which torch's schedules set in place."""
    from torchao import optim as ao

    base = {"adamw8bit": ao.AdamW8bit, "adamw4bit": ao.AdamW4bit}[impl]
    return _eager_on_cpu(base)(param_groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
