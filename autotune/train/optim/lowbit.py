"""AdamW with quantized moments: ``optimizer.impl: adamw8bit`` and ``adamw4bit``.

torchao's ``AdamW8bit`` and ``AdamW4bit`` (``torchao.optim``) keep both moments block-wise
quantized (8 bits a value and an fp32 scale per 256 values; 4 bits and one per 128) and update each
parameter with one function compiled by ``torch.compile``: the update is computed in fp32 from the
dequantized moments, which are quantized again. Not the same numbers as fp32 moments, so the study's
loss parity decides (the knob's ``numerics``).

On a GPU the rates and step counts live on the device whether or not the step is captured: the
update's compiled graphs are then the same in an eager and a captured step, so the second of two
trials finds the first's in the compile cache (torchao compiles one graph a parameter shape, about
three seconds each for full GR00T's update).

On a CPU the update runs eagerly (``torch.compiler.set_stance("force_eager")``): torchao compiles
it once per parameter shape, which with inductor's C++ backend costs seconds a shape, more than the
steps of the small models a CPU trains; the update is the same function.

In a captured step (``capturable``) the learning rates and step counts live on the parameters'
device: torchao makes both host tensors, whose values a compiled update reads when it launches, so a
CUDA graph would replay the first step's bias corrections and rate forever. On the device the
schedule sets the rate in place and the graph's own ``step += 1`` counts.
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


def _capturable(base: type) -> type:
    """``base`` whose learning rates and step counts are tensors on the parameters' device."""

    class Capturable(base):
        def __init__(self, params, **kwargs) -> None:
            super().__init__(params, **kwargs)
            for group in self.param_groups:
                group["lr"] = group["lr"].to(group["params"][0].device)

        def _steps_on_device(self) -> None:
            """Each parameter's step count moved to its device (made on the host at its first
            step, or by ``load_state_dict``); a no-op once there, so nothing moves in a capture."""
            for group in self.param_groups:
                for p in group["params"]:
                    state = self.state.get(p)
                    if state and state["step"].device != p.device:
                        state["step"] = state["step"].to(p.device)

        def load_state_dict(self, state_dict) -> None:
            # torch loads the groups' rates as saved (a checkpoint's host copy) and the step counts
            # on the host, as for any optimizer that is neither fused nor capturable: both go back
            # to the device now, before a step is captured (a move inside a capture is refused,
            # and a rate on the host would be baked into the graph)
            super().load_state_dict(state_dict)
            for group in self.param_groups:
                group["lr"] = torch.as_tensor(group["lr"]).to(group["params"][0].device)
            self._steps_on_device()

        def _state_on_device(self) -> None:
            """The state of each parameter about to take its first step, made as torchao makes it but
            with the step count on the device: made on the host, the first step's compiled update
            would take a host count and every later one a device count, a second compile, which
            inside a capture (one warm-up step before it) is refused."""
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None or self.state.get(p):
                        continue
                    state = self.state[p]
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    state["exp_avg"] = self._new_buffer(p, True)
                    state["exp_avg_sq"] = self._new_buffer(p, False)
                    if group.get("amsgrad"):
                        state["max_exp_avg_sq"] = self._new_buffer(p, False)

        def step(self, closure=None):
            self._state_on_device()
            self._steps_on_device()
            loss = super().step(closure)
            self._steps_on_device()
            return loss

    Capturable.__name__ = Capturable.__qualname__ = base.__name__
    return Capturable


def low_bit_adamw(
    param_groups: list[dict],
    impl: str,
    *,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float = 0.0,
    capturable: bool = False,
) -> torch.optim.Optimizer:
    """torchao's AdamW of ``impl`` (``adamw8bit`` or ``adamw4bit``) over ``param_groups`` (each group's
    weight decay kept); its learning rates are tensors, which torch's schedules set in place: on the
    device with the step counts for parameters on a GPU (``capturable``: a captured step needs it;
    uncaptured ones share its compiled graphs), else on the host."""
    from torchao import optim as ao

    base = {"adamw8bit": ao.AdamW8bit, "adamw4bit": ao.AdamW4bit}[impl]
    on_gpu = param_groups[0]["params"][0].device.type == "cuda"
    cls = _capturable(base) if capturable or on_gpu else _eager_on_cpu(base)
    return cls(param_groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
