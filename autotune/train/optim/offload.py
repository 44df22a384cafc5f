"""AdamW's state and update in host memory: ``optimizer.offload``.

torchao's ``CPUOffloadOptimizer`` keeps a pinned host copy of each parameter of 4096 values or
more, with its gradient; a hook copies the gradient to the host on a side stream as soon as the
backward has accumulated it, and the step runs torch's fused AdamW on the CPU for each parameter as
its copy lands, copying the parameter back on the side stream while the host steps the next (the
small tensors stay on the device with their own fused AdamW). The device holds weights and
gradients only.

The gradients reach the host before the step, so clipping cannot scale them on the device first:
:class:`OffloadAdamW` computes the norm over the device's gradients and hands each AdamW the clip
as its gradient scale (each gradient divided by ``max(1, norm / max_norm)`` inside the fused
update, as ``clip_and_step`` does for a fused AdamW on the device). The same update as torch's
fused AdamW with clipping, to float rounding, which AdamW's division by the root of the second
moment magnifies where a gradient is near zero (``tests/train/test_gpu_lowbit.py``).
"""

from __future__ import annotations

import functools

import torch

from autotune.train.optim.clip import ClipsInStep, run_closure

MINIMAL_SIZE = 4096
"""A parameter of fewer values stays on the device with its state (one host transfer each would
cost more than its update); the others' state lives on the host."""


def offload_adamw(
    param_groups: list[dict],
    *,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float = 0.0,
) -> torch.optim.Optimizer:
    """torch's fused AdamW over ``param_groups`` (on CUDA parameters), its state and update on the
    host; ``groups_given`` lists each group's parameters as given (torchao regroups them)."""
    given = [list(g["params"]) for g in param_groups]
    opt = _offload_class()(
        param_groups,
        torch.optim.AdamW,
        minimal_size=MINIMAL_SIZE,
        lr=lr,
        betas=betas,
        eps=eps,
        weight_decay=weight_decay,
        fused=True,
    )
    opt.groups_given = given
    return opt


@functools.cache
def _offload_class() -> type:
    """Made on first use: torchao is imported only where the state is offloaded."""
    from torchao.optim import CPUOffloadOptimizer

    class OffloadAdamW(ClipsInStep, CPUOffloadOptimizer):
        groups_given: list[list[torch.Tensor]]

        def optimizers(self) -> list[torch.optim.Optimizer]:
            return [*self.optim_dict.values(), *([self.d_opt] if self.d_opt is not None else [])]

        @torch.no_grad()
        def step(self, closure=None, *, max_norm: float = 0.0):
            """The host and device updates, each gradient scaled by the clip where ``max_norm > 0``;
            the norm (before clipping) in ``last_norm``."""
            loss = run_closure(closure)
            small = [p for g in self.d_param_groups for p in g["params"]]
            grads = [p.grad for p in (*self.param_d2h_map, *small) if p.grad is not None]
            self.last_norm = torch.nn.utils.get_total_norm(grads, foreach=True)
            scale = None
            if max_norm > 0:
                scale = torch.clamp((self.last_norm.float() + 1e-6) / max_norm, min=1.0)
            host = scale.cpu() if scale is not None else None
            for opt in self.optimizers():
                opt.grad_scale = scale if opt is self.d_opt else host
            try:
                super().step()
            finally:
                for opt in self.optimizers():
                    opt.grad_scale = None
            return loss

        def load_state_dict(self, state_dict: dict) -> None:
            super().load_state_dict(state_dict)
            if self.d_opt is not None:
                # torch's load gives the device optimizer new group dicts; ``param_groups`` (what a
                # schedule sets the rates of) lists ``d_param_groups``, which would be the old ones
                self.d_param_groups = self.d_opt.param_groups

        @torch.no_grad()
        def weights_loaded(self) -> None:
            """The device parameters were overwritten (a checkpoint, ``--init-from``): the host
            copies, which the next step updates and copies back, take their values."""
            for p_device, p_host in self.param_d2h_map.items():
                p_host.copy_(p_device)

    return OffloadAdamW
