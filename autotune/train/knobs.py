"""Knobs applied to the model's regions: trainability, activation checkpointing, compile, attention."""

from __future__ import annotations

import contextlib
import functools

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from autotune.config import CompileConfig, TrainConfig
from autotune.errors import IncompatibleConfigError
from autotune.train.compile_cache import cache_autocast_graphs


def _training(regions: dict[str, list[nn.Module]]) -> list[str]:
    """The regions with a parameter that trains."""
    return [
        name
        for name, modules in regions.items()
        if any(p.requires_grad for m in modules for p in m.parameters())
    ]


def apply_trainability(regions: dict[str, list[nn.Module]], cfg: TrainConfig) -> None:
    """``model.freeze`` then ``model.unfreeze``; refused where they leave nothing to train (the
    optimizer would have no parameter)."""
    trained = _training(regions)
    for name in cfg.model.freeze:
        for m in regions[name]:
            m.requires_grad_(False)
    for name in cfg.model.unfreeze:
        for m in regions[name]:
            m.requires_grad_(True)
    if trained and not _training(regions):
        raise IncompatibleConfigError(
            f"model.freeze: {cfg.model.freeze} leaves nothing to train; allowed: at least one of "
            f"{sorted(trained)} left trainable (or a frozen region named in model.unfreeze)"
        )


CACHE_KWARGS = ("past_key_values", "past_key_value", "layer_past", "cache")
"""Keyword arguments through which a block appends to a key/value cache (Hugging Face's layers)."""


def _without_cache(kwargs: dict) -> dict:
    """``kwargs`` with no cache: a checkpointed block runs its forward twice (once more in backward),
    and a cache it appends to would hold every key twice at the second run (the keys' length doubles:
    ``The expanded size of the tensor (2048) must match the existing size (1024)``). Training reads no
    cache, so the block runs without one, as Hugging Face's own gradient checkpointing does."""
    if not any(kwargs.get(k) is not None for k in CACHE_KWARGS) and not kwargs.get("use_cache"):
        return kwargs
    out = {k: (None if k in CACHE_KWARGS else v) for k, v in kwargs.items()}
    if "use_cache" in out:
        out["use_cache"] = False
    return out


def checkpoint_module(module: nn.Module) -> None:
    """Recompute ``module``'s forward in backward (keyword arguments and any outputs allowed)."""
    forward = module.forward

    @functools.wraps(forward)
    def ckpt_forward(*args, _f=forward, **kwargs):
        if torch.is_grad_enabled():
            return checkpoint(_f, *args, use_reentrant=False, **_without_cache(kwargs))
        return _f(*args, **kwargs)

    module.forward = ckpt_forward


def apply_checkpointing(
    blocks: dict[str, list[nn.Module]], names: list[str], every: int = 1
) -> int:
    """Checkpoint one block in ``every`` of the named regions (``Workload.blocks``: by default their
    modules), from each region's first; returns how many were checkpointed."""
    count = 0
    for name in names:
        for block in blocks[name][::every]:
            checkpoint_module(block)
            count += 1
    return count


def compile_kwargs(cfg: CompileConfig) -> dict:
    """``torch.compile``'s arguments for the ``compile`` knobs."""
    return dict(mode=cfg.mode, fullgraph=cfg.fullgraph, dynamic=cfg.dynamic)


def apply_compile(model: nn.Module, blocks: dict[str, list[nn.Module]], cfg: CompileConfig) -> None:
    """``all``: the whole model, as a user would try first. A named region is compiled block by block
    (``Workload.blocks``; regional compilation: blocks that share their code are compiled once for all
    instead of tracing the unrolled stack)."""
    if cfg.regions:
        cache_autocast_graphs()
    kwargs = compile_kwargs(cfg)
    if "all" in cfg.regions:
        model.compile(**kwargs)
        return
    for name in cfg.regions:
        for block in blocks[name]:
            block.compile(**kwargs)


def attention_context(backend: str) -> contextlib.AbstractContextManager:
    if backend == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    choice = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }[backend]
    # Memory-efficient and math kernels stay allowed as fallbacks for shapes the chosen kernel does not support
    # (e.g. boolean masks, which flash attention does not take).
    fallback = (
        [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
        if torch.cuda.is_available()
        else [SDPBackend.MATH]
    )
    return sdpa_kernel(list(dict.fromkeys([choice, *fallback])))
