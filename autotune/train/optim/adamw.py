"""AdamW in the configured implementation, the cosine schedule with warm-up, gradient clipping.

``impl`` picks torch's for-each, fused or per-parameter AdamW, the compiled update of
:mod:`autotune.train.optim.compiled`, or torchao's AdamW with 8- or 4-bit moments
(:mod:`autotune.train.optim.lowbit`: not the same numbers); ``offload`` steps torch's fused AdamW
on the host (:mod:`autotune.train.optim.offload`); ``streams > 1`` steps torch's AdamW in shards on concurrent
CUDA streams (:mod:`autotune.train.optim.streams`). Each exact one gives the same parameters as the others
to float rounding (``tests/train/test_optim.py``).
"""

from __future__ import annotations

import math

import torch

from autotune.config import OptimizerConfig
from autotune.config.optimizer import LOW_BIT
from autotune.train.optim.clip import ClipsInStep
from autotune.train.optim.compiled import CompiledAdamW
from autotune.train.optim.lowbit import low_bit_adamw
from autotune.train.optim.master import MasterAdamW
from autotune.train.optim.offload import offload_adamw
from autotune.train.optim.streams import StreamedAdamW


def build_optimizer(
    param_groups: list[dict],
    cfg: OptimizerConfig,
    *,
    capturable: bool,
    masters: dict[int, torch.Tensor] | None = None,
) -> torch.optim.Optimizer:
    """``capturable``: the step runs inside a CUDA graph (learning rate and step count on device).
    ``compiled`` and ``master`` are capturable whatever the graphs: their learning rates are device
    tensors. ``masters``: with ``master``, the fp32 masters of the parameters stored in bf16
    (``optim_master.bf16_with_masters``)."""
    hyper = dict(lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)
    if cfg.offload:
        return offload_adamw(param_groups, **hyper)
    if cfg.impl in LOW_BIT:
        return low_bit_adamw(param_groups, cfg.impl, **hyper, capturable=capturable)
    if cfg.impl == "compiled":
        return CompiledAdamW(param_groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)
    if cfg.impl == "master":
        return MasterAdamW(
            param_groups,
            lr=cfg.lr,
            betas=tuple(cfg.betas),
            eps=cfg.eps,
            masters=masters or {},
            exp_avg_dtype=cfg.exp_avg_dtype,
        )
    kwargs = dict(betas=tuple(cfg.betas), eps=cfg.eps)
    if cfg.impl == "fused":
        kwargs["fused"] = True
    elif cfg.impl == "foreach":
        kwargs["foreach"] = True
    else:
        kwargs["foreach"] = False
    if capturable:
        kwargs["capturable"] = True
        device = param_groups[0]["params"][0].device
        lr = torch.tensor(cfg.lr, device=device)
    else:
        lr = cfg.lr
    if cfg.streams > 1:
        return StreamedAdamW(param_groups, cfg.streams, lr=lr, **kwargs)
    return torch.optim.AdamW(param_groups, lr=lr, **kwargs)


def _adamw_groups(optimizer: torch.optim.Optimizer, knob: str) -> list[dict]:
    """The groups of a user's torch AdamW with its hyper-parameters, for ``knob``'s AdamW to replace it."""
    from autotune.errors import ConfigError

    cls = type(optimizer)
    if cls is not torch.optim.AdamW:
        raise ConfigError(f"{knob} is refused: it replaces torch's AdamW, not a {cls.__name__}")
    if optimizer.defaults.get("amsgrad") or optimizer.defaults.get("maximize"):
        raise ConfigError(f"{knob} is refused: it has no amsgrad or maximize variant")
    return [
        {k: v for k, v in g.items() if k in ("params", "lr", "weight_decay", "betas", "eps")}
        for g in optimizer.param_groups
    ]


def rebuild_optimizer(
    optimizer: torch.optim.Optimizer,
    impl: str,
    *,
    capturable: bool,
    masters: dict[int, torch.Tensor] | None = None,
    offload: bool = False,
    exp_avg_dtype: str = "fp32",
) -> torch.optim.Optimizer:
    """``optimizer`` (a fresh one, of a class with torch's ``fused``/``foreach`` options: Adam, AdamW,
    SGD, ...) made again over its own groups and hyper-parameters, with ``impl``'s kernels
    (``master``, the low-bit ones, and ``offload``: a torch AdamW made again as that AdamW)."""
    from autotune.errors import ConfigError

    cls = type(optimizer)
    defaults = dict(optimizer.defaults)
    if offload or impl in LOW_BIT:
        knob = "optimizer.offload: true" if offload else f"optimizer.impl: {impl!r}"
        groups = _adamw_groups(optimizer, knob)
        hyper = dict(
            lr=float(defaults["lr"]),
            betas=tuple(defaults["betas"]),
            eps=defaults["eps"],
            weight_decay=defaults["weight_decay"],
        )
        if offload:
            return offload_adamw(groups, **hyper)
        return low_bit_adamw(groups, impl, **hyper, capturable=capturable)
    if impl == "master":
        groups = _adamw_groups(optimizer, "optimizer.impl: 'master'")
        return MasterAdamW(
            groups,
            lr=float(defaults["lr"]),
            betas=tuple(defaults["betas"]),
            eps=defaults["eps"],
            masters=masters or {},
            exp_avg_dtype=exp_avg_dtype,
        )
    if "foreach" not in defaults:
        raise ConfigError(
            f"optimizer.impl: a {cls.__name__} has no foreach/fused kernels to choose; use a torch.optim "
            "optimizer such as AdamW"
        )
    if impl == "fused" and "fused" not in defaults:
        raise ConfigError(
            f"optimizer.impl: 'fused' is refused: torch's {cls.__name__} has no fused kernel"
        )
    defaults.update(
        foreach=impl == "foreach", **({"fused": impl == "fused"} if "fused" in defaults else {})
    )
    if capturable:
        if "capturable" not in defaults:
            raise ConfigError(
                f"graphs.mode: 'step' is refused: torch's {cls.__name__} cannot step inside a CUDA graph"
            )
        defaults["capturable"] = True
    groups = [
        {k: v for k, v in g.items() if k not in ("foreach", "fused", "capturable")}
        for g in optimizer.param_groups
    ]
    return cls(groups, **defaults)


def build_schedule(
    optimizer: torch.optim.Optimizer, cfg: OptimizerConfig
) -> torch.optim.lr_scheduler.LambdaLR:
    warmup = int(cfg.warmup_ratio * cfg.total_steps)
    if cfg.schedule == "cosine":
        warmup = max(1, warmup)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if cfg.schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, cfg.total_steps - warmup))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def clip_and_norm(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """The global gradient norm (before clipping), clipping to ``max_norm`` when it is > 0; no host sync."""
    if max_norm > 0:
        return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
    grads = [p.grad for p in params if p.grad is not None]
    return torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])
    )


def clip_and_step(
    optimizer: torch.optim.Optimizer, params: list[torch.Tensor], max_norm: float
) -> torch.Tensor:
    """Clip the gradients to ``max_norm`` and step; returns the norm before clipping (no host sync).

    A fused AdamW takes the clipping as its gradient scale (each gradient divided by
    ``max(1, norm / max_norm)`` inside its one kernel, as it does for ``GradScaler``): one read and
    write of every gradient fewer than clipping first, the same update to rounding. On an H200
    the optimizer and clipping were 13.6 ms of the tuned 87 ms ``full`` step.
    """
    if isinstance(optimizer, ClipsInStep):  # clips inside its own update
        return optimizer.clip_and_step(max_norm)
    if isinstance(optimizer, StreamedAdamW):  # clips shard by shard
        return optimizer.clip_and_step(params, max_norm)
    fused = bool(optimizer.defaults.get("fused")) and getattr(
        optimizer, "_step_supports_amp_scaling", False
    )
    if max_norm <= 0 or not fused:
        norm = clip_and_norm(params, max_norm)
        optimizer.step()
        return norm
    norm = torch.nn.utils.get_total_norm(
        [p.grad for p in params if p.grad is not None], foreach=True
    )
    # clip_grad_norm_'s coefficient, inverted; in fp32 whatever the gradients' dtype (the fused kernels
    # take no bf16 scale: "expected scalar type Float but found BFloat16" with bf16 trainable weights)
    optimizer.grad_scale = torch.clamp((norm.float() + 1e-6) / max_norm, min=1.0)
    try:
        optimizer.step()
    finally:
        optimizer.grad_scale = None
    return norm
