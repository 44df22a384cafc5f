"""Process groups, DDP with its knobs, and the bucketed all-reduce used outside captured steps."""

from __future__ import annotations

import datetime
import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from autotune.config import DDPConfig
from autotune.errors import ConfigError
from autotune.ranks import UNSET, ranks_from_env


def init_from_env() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's environment; initialises the process group.
    A value torch cannot start from is a :class:`ConfigError` naming the variable."""
    ranks = ranks_from_env()
    rank, world, local = ranks.rank, ranks.world, ranks.local
    if torch.cuda.is_available() and local >= torch.cuda.device_count():
        raise ConfigError(
            f"environment variable LOCAL_RANK={local} names a GPU this machine lacks; allowed: 0 to "
            f"{torch.cuda.device_count() - 1} ({UNSET})"
        )
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local)
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=10))
    return rank, world, local


def wrap_ddp(model: nn.Module, cfg: DDPConfig, device: torch.device) -> DDP:
    with warnings.catch_warnings():
        # torch 2.13 deprecates broadcast_buffers for forward_sync_buffers, which also syncs the
        # buffers at init where broadcast_buffers=False does not; 2.11 has only broadcast_buffers
        warnings.filterwarnings(
            "ignore", message="`broadcast_buffers` is deprecated", category=FutureWarning
        )
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

        hook = (
            default_hooks.bf16_compress_hook
            if cfg.comm_hook == "bf16"
            else default_hooks.fp16_compress_hook
        )
        ddp.register_comm_hook(None, hook)
    return ddp


class FlatGradReducer:
    """Gradients gathered into flat buffers and all-reduced to their mean in buckets of ``bucket_cap_mb``.

    Used when the whole step is a CUDA graph (the buffers' addresses are static). Each step starts
    with :meth:`begin`, which sets the gradients to None: the backward then writes each gradient
    afresh (autograd takes the incoming gradient as the parameter's) and a post-accumulate-grad hook
    copies it into its place in the buffers and makes the parameter's gradient that view. Accumulating
    into kept buffers instead costs a zeroing and an add per gradient: on two H200s, in a whole-step
    graph of `full` (6.5 GB of fp32 gradients), 521 float-add kernels and 9 fills a step took 7.3 ms;
    a copy moves two thirds of an add's bytes. With NCCL the
    collective averages (``ReduceOp.AVG``) where a division by the world size after it took another
    64 kernels and 3.2 ms a step in that trace; gloo sums and divides.

    Without ``overlap`` every bucket is all-reduced by :meth:`__call__` after the backward (between
    the graph replays). With ``overlap`` the hook also starts a bucket's all-reduce as soon as all of
    its parameters have their gradients, so inside a captured backward the collectives are recorded
    where they can run beside the rest of the backward; :meth:`__call__` then starts any bucket left
    (parameters without a gradient this step, which get zeros) and waits for all.

    Buckets are started in one fixed order on every rank (from the end of the flat buffers), a
    bucket only after every bucket before it, as DDP's reducer does: collectives must be issued in
    the same order on all ranks. The first layout follows the parameters' order, which is not the
    order a backward produces gradients in (GR00T's action and state encoders are declared after
    the DiT but receive their gradients after its whole backward: the bucket holding them held
    back every bucket behind it). So, as DDP rebuilds its buckets after the first iteration, the
    first :meth:`__call__` with ``overlap`` lays the buffers out again in the order rank 0's
    gradients arrived in (broadcast, so that every rank has the same buckets), before any capture.
    """

    def __init__(
        self, params: list[nn.Parameter], cfg: DDPConfig, world_size: int, overlap: bool = False
    ) -> None:
        self.world, self.cfg, self.params = world_size, cfg, list(params)
        self._index = {id(p): i for i, p in enumerate(self.params)}
        self.overlap = overlap and world_size > 1
        self._average = (
            world_size > 1 and dist.get_backend() == "nccl"
        )  # the collective divides (ReduceOp.AVG)
        self._works: list[tuple[torch.Tensor, torch.Tensor, object]] = []
        self._started = 0  # buckets started this step, from the last one backwards
        self._arrived: list[int] | None = (
            [] if self.overlap else None
        )  # first step: parameter indices, in order
        self._layout(self.params)
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._ready)

    def _layout(self, order: list[nn.Parameter]) -> None:
        """Flat buffers (one per dtype) holding the gradients in ``order``, and their buckets."""
        old = {id(p): p.grad for p in order}
        self.buffers: list[torch.Tensor] = []
        self._views: dict[int, torch.Tensor] = {}
        spans: list[
            tuple[int, nn.Parameter, int, int]
        ] = []  # (buffer index, parameter, start, end)
        for dtype in sorted({p.dtype for p in order}, key=str):
            group = [p for p in order if p.dtype == dtype]
            flat = torch.zeros(sum(p.numel() for p in group), dtype=dtype, device=group[0].device)
            offset = 0
            for p in group:
                view = flat[offset : offset + p.numel()].view_as(p)
                if old[id(p)] is not None:
                    view.copy_(old[id(p)])
                p.grad = self._views[id(p)] = view
                spans.append((len(self.buffers), p, offset, offset + p.numel()))
                offset += p.numel()
            self.buffers.append(flat)
        cap = int(self.cfg.bucket_cap_mb * 2**20)
        ranges = [
            (n, i, min(i + cap // b.element_size(), b.numel()))
            for n, b in enumerate(self.buffers)
            for i in range(0, b.numel(), cap // b.element_size())
        ]
        self.buckets = [self.buffers[n][i:j] for n, i, j in ranges]
        # each parameter: the buckets its gradient lies in; each bucket: how many parameters it waits for
        self._of_param: dict[int, list[int]] = {}
        self._needs = [0] * len(self.buckets)
        for n, p, start, end in spans:
            hit = [k for k, (m, i, j) in enumerate(ranges) if m == n and i < end and start < j]
            self._of_param[id(p)] = hit
            for k in hit:
                self._needs[k] += 1
        self._pending = list(self._needs)

    def begin(self) -> None:
        """Before a step's backward: no gradients, so that the backward writes them afresh."""
        for p in self.params:
            p.grad = None

    def _ready(self, param: torch.Tensor) -> None:
        view = self._views[id(param)]
        if param.grad is not view:  # written afresh (begin): into its place in the buffers
            view.copy_(param.grad)
            param.grad = view
        if not self.overlap:
            return
        if self._arrived is not None:
            self._arrived.append(self._index[id(param)])
        for k in self._of_param[id(param)]:
            self._pending[k] -= 1
        self._start(only_ready=True)

    def _start(self, only_ready: bool) -> None:
        """Start the next buckets in order: those whose gradients are all in, or every one left."""
        hook = self.cfg.comm_hook
        op = dist.ReduceOp.AVG if self._average else dist.ReduceOp.SUM
        while self._started < len(self.buckets):
            k = len(self.buckets) - 1 - self._started
            if only_ready and self._pending[k] > 0:
                return
            bucket = self.buckets[k]
            send = (
                bucket.to(torch.bfloat16 if hook == "bf16" else torch.float16)
                if hook != "none"
                else bucket
            )
            self._works.append((bucket, send, dist.all_reduce(send, op=op, async_op=True)))
            self._started += 1

    def __call__(self) -> None:
        for p in self.params:  # no gradient this step: zeros in its place
            if p.grad is None:
                view = self._views[id(p)]
                view.zero_()
                p.grad = view
        if self.world == 1:
            return
        self._start(
            only_ready=False
        )  # every bucket the hooks did not start (all of them without overlap)
        for _, _, work in self._works:
            work.wait()
        for bucket, send, _ in self._works:
            if send is not bucket:
                bucket.copy_(send)
            if not self._average:
                bucket.div_(self.world)
        self._works, self._started = [], 0
        if self.overlap:
            self._pending = list(self._needs)
            if self._arrived is not None:
                self._rebuild()

    def _rebuild(self) -> None:
        """Lay the buffers out in the order rank 0's gradients arrived in this step (the first)."""
        arrived, self._arrived = self._arrived, None
        capturing = self.buffers[0].is_cuda and torch.cuda.is_current_stream_capturing()
        if capturing:  # a graph holds the buffers' addresses: keep this layout
            return
        seen = list(dict.fromkeys(arrived))
        order = seen + sorted(
            set(range(len(self.params))) - set(seen)
        )  # no gradient this step: last
        order_t = torch.tensor(order, dtype=torch.int64, device=self.buffers[0].device)
        dist.broadcast(order_t, src=0)
        # the first gradient to arrive goes to the end of the buffers, whose buckets start first
        self._layout([self.params[i] for i in reversed(order_t.tolist())])
