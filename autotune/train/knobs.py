"""Knobs applied to the model's regions: trainability, activation checkpointing, compile, attention."""

from __future__ import annotations

import contextlib
import functools

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from autotune.config import CompileConfig, TrainConfig


def apply_trainability(regions: dict[str, list[nn.Module]], cfg: TrainConfig) -> None:
    for name in cfg.model.freeze:
        for m in regions[name]:
            m.requires_grad_(False)
    for name in cfg.model.unfreeze:
        for m in regions[name]:
            m.requires_grad_(True)


def apply_checkpointing(regions: dict[str, list[nn.Module]], names: list[str]) -> None:
    """Checkpoint block by block where the module is a block stack, else the whole module."""
    for name in names:
        for m in regions[name]:
            if hasattr(m, "activation_checkpointing"):
                m.activation_checkpointing = True
            else:
                forward = m.forward

                @functools.wraps(forward)
                def ckpt_forward(*args, _f=forward, **kwargs):
                    if torch.is_grad_enabled():
                        return checkpoint(_f, *args, use_reentrant=False, **kwargs)
                    return _f(*args, **kwargs)

                m.forward = ckpt_forward


def apply_compile(model: nn.Module, regions: dict[str, list[nn.Module]], cfg: CompileConfig) -> None:
    """``all``: the whole model, as a user would try first. A named region is compiled block by block
    where it is a block stack (regional compilation: the blocks share their code, so Dynamo compiles
    each kind of block once instead of tracing the unrolled stack), else as one module."""
    kwargs = dict(mode=cfg.mode, fullgraph=cfg.fullgraph, dynamic=cfg.dynamic)
    if "all" in cfg.regions:
        model.compile(**kwargs)
        return
    for name in cfg.regions:
        for m in regions[name]:
            blocks = getattr(m, "blocks", None)
            if isinstance(blocks, nn.ModuleList) and len(blocks):
                for block in blocks:
                    block.compile(**kwargs)
            else:
                m.compile(**kwargs)


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
    fallback = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH] if torch.cuda.is_available() else [SDPBackend.MATH]
    return sdpa_kernel(list(dict.fromkeys([choice, *fallback])))
