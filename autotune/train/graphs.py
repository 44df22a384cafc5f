"""CUDA-graph capture: per region (``make_graphed_callables``) or the whole step (``torch.cuda.graph``).

Known interactions, and how they are handled here:

* **Random numbers** — noise, flow-matching times and dropout are drawn with torch's CUDA
  generator inside the graph; graph capture registers the Philox state, so each replay draws new
  numbers (tested on the GPU).
* **Pinned memory during capture** — the DataLoader's pin-memory thread allocates page-locked
  memory, which a global-mode capture forbids. Region graphs are captured before the loader
  starts; the whole step is captured with ``capture_error_mode="thread_local"``.
* **Autocast's cache** — disabled under graphs (``cache_enabled=False`` in ``precision``).
* **fp16 scaler** — its inf check syncs the host; refused for whole-step capture at load time.
* **DDP** — whole-step capture replaces DDP by bucketed all-reduces of a flat gradient buffer
  outside the graph (as LoongForge does); region graphs are captured before DDP wraps the model.
* **Static inputs** — every replay copies the new batch into the captured input buffers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def record_region_inputs(model: nn.Module, modules: list[nn.Module], run: Callable[[], None]) -> list[tuple]:
    """Run ``run()`` once and record, in execution order, each module's positional inputs."""
    seen: dict[int, tuple] = {}
    order: list[nn.Module] = []

    def hook(mod, args):
        if id(mod) not in seen:
            seen[id(mod)] = tuple(
                a.detach().clone().requires_grad_(a.requires_grad) if torch.is_tensor(a) else a for a in args
            )
            order.append(mod)

    handles = [m.register_forward_pre_hook(hook) for m in modules]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return [(m, seen[id(m)]) for m in order]


class _ForwardGraph:
    """A forward-only graph of a frozen module (no parameters train, no input needs grad)."""

    def __init__(self, module: nn.Module, sample_args: tuple, pool, warmup: int) -> None:
        self.forward = module.forward
        self.static_in = tuple(a.clone() if torch.is_tensor(a) else a for a in sample_args)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.no_grad():
            for _ in range(warmup):
                self.forward(*self.static_in)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(self.graph, pool=pool):
            self.static_out = self.forward(*self.static_in)

    def __call__(self, *args):
        for dst, src in zip(self.static_in, args):
            if torch.is_tensor(dst):
                dst.copy_(src)
        self.graph.replay()
        return self.static_out


def graph_regions(recorded: list[tuple[nn.Module, tuple]], warmup: int) -> None:
    """Replace each recorded module's forward by a graph replay.

    Modules with trainable parameters or inputs that need grad go through
    ``torch.cuda.make_graphed_callables`` (forward and backward graphs); frozen ones get a
    forward-only graph (their backward is never run).
    """
    trainable = [(m, a) for m, a in recorded if _needs_backward(m, a)]
    frozen = [(m, a) for m, a in recorded if not _needs_backward(m, a)]
    pool = torch.cuda.graph_pool_handle()
    for module, args in frozen:
        module.forward = _ForwardGraph(module, args, pool, warmup)
    if trainable:
        modules = tuple(m for m, _ in trainable)
        args = tuple(a for _, a in trainable)
        torch.cuda.make_graphed_callables(modules, args, num_warmup_iters=warmup)


def _needs_backward(module: nn.Module, args: tuple) -> bool:
    return any(p.requires_grad for p in module.parameters()) or any(torch.is_tensor(a) and a.requires_grad for a in args)


class StepGraph:
    """The whole training step (forward, backward, optimizer) captured as CUDA graphs.

    ``fwd_bwd`` holds zeroing the gradients, the forward and the backward; ``update`` holds
    clipping and the optimizer step. With several ranks the gradients are all-reduced between
    the two replays, outside the graphs (``reduce_grads``), or, with ``ddp.graph_overlap``, inside
    ``fwd_bwd`` by the reducer's hooks as the backward produces them (``reduce_grads`` is then None).
    """

    def __init__(self, forward_backward: Callable[[dict], torch.Tensor], update: Callable[[], torch.Tensor],
                 static_batch: dict[str, torch.Tensor], reduce_grads: Callable[[], None] | None) -> None:
        self.static_batch = static_batch
        self.reduce_grads = reduce_grads
        self.fwd_bwd, self.update = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(self.fwd_bwd, pool=pool, capture_error_mode="thread_local"):
            self.loss = forward_backward(static_batch)
        with torch.cuda.graph(self.update, pool=pool, capture_error_mode="thread_local"):
            self.grad_norm = update()

    def __call__(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        for k, v in batch.items():
            self.static_batch[k].copy_(v, non_blocking=True)
        self.fwd_bwd.replay()
        if self.reduce_grads is not None:
            self.reduce_grads()
        self.update.replay()
        return self.loss, self.grad_norm
