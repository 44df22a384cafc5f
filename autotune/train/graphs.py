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
* **Keyword arguments, tuple and ``ModelOutput`` results** — a region's module is captured as a
  function of the tensors of its call (``FlatCall``); its other arguments are held as recorded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import nn
from torch.utils._pytree import TreeSpec, tree_flatten, tree_map_only, tree_unflatten

from autotune.errors import TrialError

Call = tuple[tuple, dict]


def _detached(value):
    return tree_map_only(
        torch.Tensor, lambda a: a.detach().clone().requires_grad_(a.requires_grad), value
    )


def record_region_inputs(
    model: nn.Module, modules: list[nn.Module], run: Callable[[], None]
) -> list[tuple[nn.Module, Call]]:
    """Run ``run()`` once and record, in execution order, each module's first call (its positional
    and keyword arguments, tensors detached copies)."""
    seen: dict[int, Call] = {}
    order: list[nn.Module] = []

    def hook(mod, args, kwargs):
        if id(mod) not in seen:
            seen[id(mod)] = _detached((tuple(args), dict(kwargs)))
            order.append(mod)

    handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in modules]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return [(m, seen[id(m)]) for m in order]


def _same(a, b) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001  objects that do not compare: only the same object is the same
        return False


class FlatCall(nn.Module):
    """One module's forward as a function of the tensors of a recorded call, returning the tensors of
    its output: what graph capture takes (tensors in, tensors out), for modules that take keyword
    arguments and return tuples or ``ModelOutput``s. The call's other arguments (flags, None, caches)
    are held as recorded; a later call that changes them is refused (the graph would ignore them)."""

    def __init__(self, module: nn.Module, call: Call) -> None:
        super().__init__()
        self.inner = (
            module  # its parameters are the graph's (make_graphed_callables reads .parameters())
        )
        self.inner_forward = module.forward
        leaves, self.in_spec = tree_flatten(call)
        self.in_constants = [None if torch.is_tensor(x) else x for x in leaves]
        self.in_tensor = [torch.is_tensor(x) for x in leaves]
        self.sample = tuple(x for x in leaves if torch.is_tensor(x))
        self.out_spec: TreeSpec | None = None
        self.out_constants: list = []

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        it = iter(tensors)
        args, kwargs = tree_unflatten(
            [next(it) if t else c for t, c in zip(self.in_tensor, self.in_constants)], self.in_spec
        )
        leaves, self.out_spec = tree_flatten(self.inner_forward(*args, **kwargs))
        self.out_constants = [None if torch.is_tensor(x) else x for x in leaves]
        return tuple(x for x in leaves if torch.is_tensor(x))

    def tensors(self, args: tuple, kwargs: dict) -> tuple[torch.Tensor, ...]:
        leaves, spec = tree_flatten((tuple(args), dict(kwargs)))
        ok = spec == self.in_spec and all(
            torch.is_tensor(x) if t else _same(x, c)
            for x, t, c in zip(leaves, self.in_tensor, self.in_constants)
        )
        if not ok:
            raise TrialError(
                f"graphs.regions: {type(self.inner).__name__} was called with other non-tensor arguments "
                "than when its graph was captured; a captured region needs the same call every step",
                "config",
            )
        return tuple(x for x in leaves if torch.is_tensor(x))

    def output(self, tensors: tuple[torch.Tensor, ...]):
        it = iter(tensors)
        return tree_unflatten(
            [next(it) if c is None else c for c in self.out_constants], self.out_spec
        )


class _ForwardGraph:
    """A forward-only graph of a frozen module (no parameters train, no input needs grad)."""

    def __init__(self, flat: FlatCall, pool, warmup: int) -> None:
        self.flat = flat
        self.static_in = tuple(a.clone() for a in flat.sample)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.no_grad():
            for _ in range(warmup):
                flat(*self.static_in)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(self.graph, pool=pool):
            self.static_out = flat(*self.static_in)

    def __call__(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        for dst, src in zip(self.static_in, tensors):
            dst.copy_(src)
        self.graph.replay()
        return self.static_out


def _replay(flat: FlatCall, graphed: Callable) -> Callable:
    def forward(*args, **kwargs):
        return flat.output(graphed(*flat.tensors(args, kwargs)))

    return forward


def graph_regions(recorded: list[tuple[nn.Module, Call]], warmup: int) -> None:
    """Replace each recorded module's forward by a graph replay.

    Modules with trainable parameters or inputs that need grad go through
    ``torch.cuda.make_graphed_callables`` (forward and backward graphs); frozen ones get a
    forward-only graph (their backward is never run).
    """
    flats = [(m, FlatCall(m, call)) for m, call in recorded]
    trainable = [(m, f) for m, f in flats if _needs_backward(m, f.sample)]
    pool = torch.cuda.graph_pool_handle()
    for module, flat in flats:
        if (module, flat) not in trainable:
            module.forward = _replay(flat, _ForwardGraph(flat, pool, warmup))
    if trainable:
        graphed = torch.cuda.make_graphed_callables(
            tuple(f for _, f in trainable),
            tuple(f.sample for _, f in trainable),
            num_warmup_iters=warmup,
        )
        for (module, flat), g in zip(trainable, graphed):
            module.forward = _replay(flat, g)


def _needs_backward(module: nn.Module, args: tuple) -> bool:
    return any(p.requires_grad for p in module.parameters()) or any(
        torch.is_tensor(a) and a.requires_grad for a in args
    )


class StepGraph:
    """The whole training step (forward, backward, optimizer) captured as CUDA graphs.

    ``fwd_bwd`` holds zeroing the gradients, the forward and the backward; ``update`` holds
    clipping and the optimizer step. With several ranks the gradients are all-reduced between
    the two replays, outside the graphs (``reduce_grads``), or, with ``ddp.graph_overlap``, inside
    ``fwd_bwd`` by the reducer's hooks as the backward produces them (``reduce_grads`` is then None).
    ``before_update()`` runs once between the two captures, outside both: the gradients that the
    update will read exist then, at the addresses every replay writes them to.
    """

    def __init__(
        self,
        forward_backward: Callable[[dict], torch.Tensor],
        update: Callable[[], torch.Tensor],
        static_batch: dict[str, torch.Tensor],
        reduce_grads: Callable[[], None] | None,
        before_update: Callable[[], None] | None = None,
    ) -> None:
        self.static_batch = static_batch
        self.reduce_grads = reduce_grads
        self.fwd_bwd, self.update = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(self.fwd_bwd, pool=pool, capture_error_mode="thread_local"):
            self.loss = forward_backward(static_batch)
        if before_update is not None:  # uncaptured, between the two captures
            before_update()
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


@contextlib.contextmanager
def sm_carveout_for(sms: int):
    """cuBLAS GEMMs launched (or captured) inside run on all but ``sms`` streaming multiprocessors."""
    if sms <= 0:
        yield
        return
    before = torch._C._get_sm_carveout_experimental()
    torch._C._set_sm_carveout_experimental(sms)
    try:
        yield
    finally:
        torch._C._set_sm_carveout_experimental(before)


class OverlapStepGraph:
    """The step captured as three graphs, the optimizer's update beside the next step's prefix.

    ``prefix(batch)`` is the forward's frozen first part (no backward; it reads none of the weights
    the update writes), ``rest(carry, batch)`` the rest of the forward, the backward and the
    gradient norm (returns ``(loss, norm)``), ``update()`` the optimizer's update of the weights
    from those gradients. A replay of step k runs step k-1's update on a side stream while a
    high-priority stream runs step k's prefix, then ``rest`` once both are done: the update is
    still applied before the first weight it writes is read, and its gradients are not overwritten
    before it has read them. The prefix's graph has a memory pool of its own, so that nothing it
    allocates is what the concurrent update reads or writes. The last step's update waits for the
    next replay, or for :meth:`flush` (before the weights are read: a checkpoint, the end of training).
    ``before_update()`` runs once between the captures of ``rest`` and ``update``, outside both.
    ``sm_carveout``: the prefix is captured with its cuBLAS GEMMs on all but that many SMs, which the
    update beside it can then hold (:func:`sm_carveout_for`).
    """

    def __init__(
        self,
        prefix: Callable[[dict], object],
        rest: Callable[[object, dict], tuple[torch.Tensor, torch.Tensor]],
        update: Callable[[], None],
        static_batch: dict[str, torch.Tensor],
        before_update: Callable[[], None] | None = None,
        sm_carveout: int = 0,
    ) -> None:
        self.static_batch = static_batch
        self.g_prefix, self.g_rest, self.g_update = (
            torch.cuda.CUDAGraph(),
            torch.cuda.CUDAGraph(),
            torch.cuda.CUDAGraph(),
        )
        # lower number, higher priority (out of range maps to the highest). torch instantiates a
        # graph to run each kernel at the priority of the stream it was captured on, not the one it
        # is replayed on: the prefix is captured on the high-priority stream, so that its blocks are
        # scheduled ahead of the update's queued ones rather than behind all of them
        self.first, self.side = torch.cuda.Stream(priority=-100), torch.cuda.Stream(priority=0)
        pool = torch.cuda.graph_pool_handle()
        self.first.wait_stream(torch.cuda.current_stream())
        with (
            sm_carveout_for(sm_carveout),
            torch.cuda.graph(
                self.g_prefix,
                pool=torch.cuda.graph_pool_handle(),
                stream=self.first,
                capture_error_mode="thread_local",
            ),
        ):
            self.carry = prefix(static_batch)
        torch.cuda.current_stream().wait_stream(self.first)
        with torch.cuda.graph(self.g_rest, pool=pool, capture_error_mode="thread_local"):
            self.loss, self.grad_norm = rest(self.carry, static_batch)
        if before_update is not None:  # uncaptured, between the captures (as StepGraph's)
            before_update()
        with torch.cuda.graph(self.g_update, pool=pool, capture_error_mode="thread_local"):
            update()
        self.pending = False

    def __call__(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        for k, v in batch.items():
            self.static_batch[k].copy_(v, non_blocking=True)
        main = torch.cuda.current_stream()
        self.first.wait_stream(main)
        with torch.cuda.stream(self.first):  # queued first: its first blocks need not wait either
            self.g_prefix.replay()
        if self.pending:
            self.side.wait_stream(main)
            with torch.cuda.stream(self.side):
                self.g_update.replay()
        main.wait_stream(self.first)
        if self.pending:
            main.wait_stream(self.side)
        self.g_rest.replay()
        self.pending = True
        return self.loss, self.grad_norm

    def flush(self) -> None:
        """Apply the update still waiting for the next replay, if any (on the current stream)."""
        if self.pending:
            self.g_update.replay()
            self.pending = False
