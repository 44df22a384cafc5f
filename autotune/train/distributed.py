"""Process groups, DDP with its knobs, and the bucketed all-reduce used outside captured steps."""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from autotune.config import DDPConfig


def init_from_env() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's environment; initialises the process group."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local)
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=10))
    return rank, world, local


def wrap_ddp(model: nn.Module, cfg: DDPConfig, device: torch.device) -> DDP:
    ddp = DDP(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=cfg.bucket_cap_mb,
        gradient_as_bucket_view=cfg.gradient_as_bucket_view,
        static_graph=cfg.static_graph,
        broadcast_buffers=cfg.broadcast_buffers,
    )
    if cfg.comm_hook != "none":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        hook = default_hooks.bf16_compress_hook if cfg.comm_hook == "bf16" else default_hooks.fp16_compress_hook
        ddp.register_comm_hook(None, hook)
    return ddp


class FlatGradReducer:
    """Gradients as views of flat buffers, all-reduced in buckets of ``bucket_cap_mb``.

    Used when the whole step is a CUDA graph: backward accumulates into the views in place (their
    addresses are static), and the all-reduce runs between the graph replays.
    """

    def __init__(self, params: list[nn.Parameter], cfg: DDPConfig, world_size: int) -> None:
        self.world, self.cfg = world_size, cfg
        self.buffers: list[torch.Tensor] = []
        for dtype in sorted({p.dtype for p in params}, key=str):
            group = [p for p in params if p.dtype == dtype]
            flat = torch.zeros(sum(p.numel() for p in group), dtype=dtype, device=group[0].device)
            offset = 0
            for p in group:
                p.grad = flat[offset : offset + p.numel()].view_as(p)
                offset += p.numel()
            self.buffers.append(flat)
        cap = int(cfg.bucket_cap_mb * 2**20)
        self.buckets = [b[i : i + cap // b.element_size()] for b in self.buffers for i in range(0, b.numel(), cap // b.element_size())]

    def zero(self) -> None:
        for b in self.buffers:
            b.zero_()

    def __call__(self) -> None:
        if self.world == 1:
            return
        works, casts = [], []
        for bucket in self.buckets:
            send = bucket.to(torch.bfloat16 if self.cfg.comm_hook == "bf16" else torch.float16) if self.cfg.comm_hook != "none" else bucket
            casts.append((bucket, send))
            works.append(dist.all_reduce(send, async_op=True))
        for work in works:
            work.wait()
        for bucket, send in casts:
            if send is not bucket:
                bucket.copy_(send)
            bucket.div_(self.world)
