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

from autotune.train.optim.clip import ClipsInStep, run_closure

CHUNK = 8
"""Tensors per compiled call. One graph over all of ``full``'s 517 trainable tensors did not
finish compiling in 15 minutes on a CPU, and compile time grows with the tensors of a graph (on a
loaded 2-core CPU ~50 s for 8, ~120 s for 26). Chunks of one length, with dynamic sizes and the
per-tensor hyper-parameters as device tensors, make two graphs (the chunk and the remainder) that
every chunk reuses; 8 tensors a kernel still move tens of MB per launch where the tensors are large."""


def clipped_adamw(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    steps: list[torch.Tensor],
    weight_decays: list[torch.Tensor],
    lr: torch.Tensor,
    beta1: float,
    beta2: float,
    eps: float,
    coef: torch.Tensor | None,
) -> None:
    """AdamW on a chunk of flat tensors, each gradient multiplied by ``coef`` first (None: not
    clipped); ``weight_decays`` are 0-d tensors, one per tensor (its group's value), ``lr`` the
    chunk's 0-d learning rate.

    The op sequence of ``torch.optim.adam._multi_tensor_adam`` with ``capturable=True`` and
    decoupled weight decay, except that the scaled gradients are a temporary that Inductor keeps in
    registers instead of writing them back, and that a tensor without weight decay is multiplied
    by exactly 1.
    """
    torch._foreach_add_(steps, 1)
    decay = torch._foreach_mul(weight_decays, lr)  # becomes 1 - lr * wd
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
    torch._foreach_div_(step_size, lr)
    torch._foreach_reciprocal_(step_size)
    torch._foreach_sqrt_(bc2_sqrt)
    denom = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denom, bc2_sqrt)
    torch._foreach_add_(denom, eps)
    torch._foreach_div_(denom, step_size)
    torch._foreach_addcdiv_(params, exp_avgs, denom)


def flat(t: torch.Tensor) -> torch.Tensor:
    """A 1-D tensor on ``t``'s memory that is not a view of it: Dynamo guards a view's base (its rank
    and strides), which would recompile the update for chunks of differently shaped tensors."""
    assert t.is_contiguous(), "parameters, gradients and moments are contiguous"
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(
        t.untyped_storage(), t.storage_offset(), (t.numel(),), (1,)
    )


def _cut(rows: list[tuple], lr: torch.Tensor) -> list[tuple]:
    """Rows of (param, grad, exp_avg, exp_avg_sq, step, wd) as chunks of ``CHUNK`` lists, with ``lr``."""
    out = []
    for i in range(0, len(rows), CHUNK):
        columns = [list(c) for c in zip(*rows[i : i + CHUNK])]
        out.append((*columns, lr))
    return out


class CompiledAdamW(ClipsInStep, torch.optim.AdamW):
    """``torch.optim.AdamW`` (capturable, for-each state) whose step runs :func:`clipped_adamw` compiled.

    ``step(max_norm=...)`` clips to ``max_norm`` (0, the default: no clipping) and steps;
    ``clip_and_step(max_norm)`` does the same and returns the gradient norm before clipping.
    """

    def __init__(
        self, param_groups: list[dict], *, lr: float, betas: tuple[float, float], eps: float
    ) -> None:
        device = param_groups[0]["params"][0].device
        super().__init__(
            param_groups,
            lr=torch.tensor(lr, device=device),
            betas=betas,
            eps=eps,
            foreach=True,
            capturable=True,
        )
        beta1, beta2 = betas

        def update(params, grads, exp_avgs, exp_avg_sqs, steps, weight_decays, lr, coef):
            # the betas and eps as constants of the graph: as arguments of a dynamic graph they would be
            # traced as symbolic floats
            clipped_adamw(
                params,
                grads,
                exp_avgs,
                exp_avg_sqs,
                steps,
                weight_decays,
                lr,
                beta1,
                beta2,
                eps,
                coef,
            )

        self._update = torch.compile(update, fullgraph=True, dynamic=True)
        self._flat: dict[int, tuple[torch.Tensor, ...]] = {}

    def _state_of(self, p: torch.Tensor, weight_decay: float) -> tuple[torch.Tensor, ...]:
        """Flat aliases of the parameter and its moments, its step count and its weight decay as a
        0-d tensor, made once; the state as torch's capturable AdamW makes it."""
        if id(p) not in self._flat:
            st = self.state[p]
            if not st:
                st["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            wd = torch.tensor(
                float(weight_decay), device=p.device
            )  # one per tensor: no aliasing among the inputs
            self._flat[id(p)] = (
                flat(p),
                flat(st["exp_avg"]),
                flat(st["exp_avg_sq"]),
                st["step"],
                wd,
            )
        return self._flat[id(p)]

    def _chunks(self) -> list[tuple]:
        """The tensors that have gradients in chunks of ``CHUNK`` that share a learning-rate tensor:
        (flat parameters, gradients, both moments, step counts, weight decays, lr)."""
        chunks: list[tuple] = []
        rows: list[tuple] = []
        lr = None
        for group in self.param_groups:
            if rows and (group["lr"] is not lr):
                chunks += _cut(rows, lr)
                rows = []
            lr = group["lr"]
            for p in group["params"]:
                if p.grad is not None:
                    param, m, v, step, wd = self._state_of(p, group["weight_decay"])
                    rows.append((param, flat(p.grad), m, v, step, wd))
        return chunks + (_cut(rows, lr) if rows else [])

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._flat.clear()  # the aliases were of the replaced moments

    @torch.no_grad()
    def step(self, closure=None, *, max_norm: float = 0.0):
        loss = run_closure(closure)
        chunks = self._chunks()
        norm = torch.linalg.vector_norm(
            torch.stack(torch._foreach_norm([g for c in chunks for g in c[1]]))
        )
        coef = (
            torch.clamp(max_norm / (norm + 1e-6), max=1.0) if max_norm > 0 else None
        )  # clip_grad_norm_'s
        # sizes are symbols: without duck sizing, chunks whose tensors happen to share sizes reuse the graph too
        with (
            fx_config.patch(use_duck_shape=False),
            torch._dynamo.config.patch(specialize_float=True),
        ):
            for chunk in chunks:
                self._update(*chunk, coef)
        self.last_norm = norm
        return loss
