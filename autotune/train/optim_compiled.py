"""AdamW with its clipped update compiled by ``torch.compile``: ``optimizer.impl: compiled``.

A step is two passes over the optimizer's memory. The gradient norm is one multi-tensor reduction
over the gradients (``torch._foreach_norm``, as ``clip_grad_norm_`` computes it); the update is
one compiled graph of for-each ops that Inductor fuses into kernels reading each parameter,
gradient and both moments once and writing the parameter and both moments once, with the clip
coefficient applied to each gradient as it is read (never written back). That is the memory
traffic of fp32 AdamW, nothing more: 7 x 4 bytes per trainable parameter, plus 4 for the norm.

The math is torch's capturable for-each AdamW (decoupled weight decay, bias corrections from the
step counts on the device, learning rate a device tensor that the schedule fills), so the state
dict is ``torch.optim.AdamW``'s and the parameters agree with torch's implementations to float
rounding (``tests/train/test_optim.py``). Nothing syncs the host: the step can be captured in a
CUDA graph. The first step compiles (a warm-up step, before any capture).
"""

from __future__ import annotations

import torch
from torch.fx.experimental import _config as fx_config

CHUNK = 32
"""Tensors per compiled call. One graph over all of ``full``'s 517 trainable tensors did not
finish compiling in 15 minutes on a CPU; chunks of one length, with dynamic sizes and the
per-tensor hyper-parameters as device tensors, make two graphs (the chunk and the remainder)
that every chunk reuses."""


def clipped_adamw(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
                  exp_avg_sqs: list[torch.Tensor], steps: list[torch.Tensor], lrs: list[torch.Tensor],
                  weight_decays: list[torch.Tensor], beta1: float, beta2: float, eps: float,
                  coef: torch.Tensor | None) -> None:
    """AdamW on flat views of a chunk of tensors, each gradient multiplied by ``coef`` first (None:
    not clipped); ``lrs`` and ``weight_decays`` are 0-d tensors, one per tensor (its group's).

    The op sequence of ``torch.optim.adam._multi_tensor_adam`` with ``capturable=True`` and
    decoupled weight decay, except that the scaled gradients are a temporary that Inductor keeps in
    registers instead of writing them back, and that a tensor without weight decay is multiplied
    by exactly 1.
    """
    torch._foreach_add_(steps, 1)
    decay = torch._foreach_mul(lrs, weight_decays)  # becomes 1 - lr * wd
    torch._foreach_neg_(decay)
    torch._foreach_add_(decay, 1)
    torch._foreach_mul_(params, decay)
    g = torch._foreach_mul(grads, coef) if coef is not None else grads
    torch._foreach_lerp_(exp_avgs, g, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, g, g, 1 - beta2)
    step_size = torch._foreach_pow(beta1, steps)  # becomes -lr / (1 - beta1^t)
    bc2_sqrt = torch._foreach_pow(beta2, steps)  # becomes sqrt(1 - beta2^t)
    torch._foreach_sub_(step_size, 1)
    torch._foreach_sub_(bc2_sqrt, 1)
    torch._foreach_neg_(bc2_sqrt)
    torch._foreach_div_(step_size, lrs)
    torch._foreach_reciprocal_(step_size)
    torch._foreach_sqrt_(bc2_sqrt)
    denom = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denom, bc2_sqrt)
    torch._foreach_add_(denom, eps)
    torch._foreach_div_(denom, step_size)
    torch._foreach_addcdiv_(params, exp_avgs, denom)


class CompiledAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` (capturable, for-each state) whose step runs :func:`clipped_adamw` compiled.

    ``step(max_norm=...)`` clips to ``max_norm`` (0, the default: no clipping) and steps;
    ``clip_and_step(max_norm)`` does the same and returns the gradient norm before clipping.
    """

    def __init__(self, param_groups: list[dict], *, lr: float, betas: tuple[float, float], eps: float) -> None:
        device = param_groups[0]["params"][0].device
        super().__init__(param_groups, lr=torch.tensor(lr, device=device), betas=betas, eps=eps,
                         foreach=True, capturable=True)
        self._update = torch.compile(clipped_adamw, fullgraph=True, dynamic=True)
        self._decays: dict[tuple, torch.Tensor] = {}

    def _chunks(self) -> list[tuple[list[torch.Tensor], ...]]:
        """The tensors that have gradients, in chunks of ``CHUNK``: flat parameters, gradients,
        moments, step counts, and their groups' learning rates and weight decays. The state is
        created as torch's capturable AdamW creates it (step count on the device)."""
        lists: tuple[list[torch.Tensor], ...] = ([], [], [], [], [], [], [])
        for group in self.param_groups:
            wd = self._weight_decay(group)
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                for lst, item in zip(lists, (p.detach().view(-1), p.grad.view(-1), st["exp_avg"].view(-1),
                                             st["exp_avg_sq"].view(-1), st["step"], group["lr"], wd)):
                    lst.append(item)
        return [tuple(lst[i:i + CHUNK] for lst in lists) for i in range(0, len(lists[0]), CHUNK)]

    def _weight_decay(self, group: dict) -> torch.Tensor:
        """The group's weight decay as a device tensor (a value the compiled graph does not specialise on)."""
        wd = float(group["weight_decay"])
        key = (wd, group["lr"].device)
        if key not in self._decays:
            self._decays[key] = torch.tensor(wd, device=group["lr"].device)
        return self._decays[key]

    def clip_and_step(self, max_norm: float) -> torch.Tensor:
        """Through ``step`` so that its hooks (the schedule's counter, the profiler's label) see it."""
        self.step(max_norm=max_norm)
        return self.last_norm

    @torch.no_grad()
    def step(self, closure=None, *, max_norm: float = 0.0):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        chunks = self._chunks()
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm([g for c in chunks for g in c[1]])))
        coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0) if max_norm > 0 else None  # clip_grad_norm_'s
        beta1, beta2 = self.defaults["betas"]
        # sizes are symbols: without duck sizing, chunks whose tensors happen to share sizes reuse the graph too
        with fx_config.patch(use_duck_shape=False):
            for chunk in chunks:
                self._update(*chunk, beta1, beta2, self.defaults["eps"], coef)
        self.last_norm = norm
        return loss
