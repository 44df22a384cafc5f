"""A training session in one process: the model with every knob applied, and its step function."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch
from torch import nn

from autotune.config import TrainConfig
from autotune.config.compat import Machine, check_compatible, check_data, check_machine
from autotune.config.memory import micro_batch_size
from autotune.config.named import checking_values
from autotune.errors import IncompatibleConfigError, WorkloadError
from autotune.train import accumulate, distributed, graphs, knobs, memcap, precision
from autotune.train.optim import adamw as optim
from autotune.train.optim import master as optim_master
from autotune.train.window import cost
from autotune.train.window.capture_path import capture_path
from autotune.workloads import Batch, LossSplit, Workload, contract, get_workload


def resolve_device(cfg: TrainConfig, local_rank: int) -> torch.device:
    if cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def to_device(batch: Batch, device: torch.device) -> Batch:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


class Session:
    """Builds the workload's model for ``cfg`` on this process's device and runs training steps.

    ``step(batch)`` returns device tensors (loss, gradient norm) without synchronising the host.
    With ``model`` (and ``workload``, an adapter of the user's loss and regions: ``autotune.api``)
    the knobs are applied to a model built elsewhere instead.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        rank: int = 0,
        world_size: int = 1,
        local_rank: int = 0,
        *,
        model: nn.Module | None = None,
        workload: Workload | None = None,
    ) -> None:
        budget = memcap.budget_from_env()  # the environment's, not a value of cfg
        # every check of cfg's values below: a caller that read cfg from a file names it
        with checking_values():
            self._build(cfg, rank, world_size, local_rank, model, workload, budget)

    def _build(
        self,
        cfg: TrainConfig,
        rank: int,
        world_size: int,
        local_rank: int,
        model: nn.Module | None,
        workload: Workload | None,
        budget: int | None,
    ) -> None:
        self.cfg, self.rank, self.world = cfg, rank, world_size
        self.accumulation = cfg.memory.accumulation_steps
        self.micro_batch = micro_batch_size(cfg.batch_size, self.accumulation)
        self.load_times: list[
            float
        ] = []  # seconds each host batch took in its worker (see batches)
        machine = Machine.current(world_size)
        check_machine(cfg, machine)  # before the workload's module (module:Class) is imported
        with checking_values(WorkloadError):  # a name the configuration gives
            self.workload = workload or get_workload(cfg.workload)
        cfg.model.bind_class(self.workload.model_knobs, cfg.workload)  # a module:Class's own knobs
        self.device = resolve_device(cfg, local_rank)
        # before the model: the cap counts the CUDA context as it stands, the model within the cap
        self.cap = memcap.apply_cap(self.device, budget)
        if model is None:
            with checking_values(WorkloadError):
                self.workload.check_preset(cfg.preset)
            self.workload.fit_data(
                cfg.preset, cfg.data
            )  # the dataset's shapes, before any model is built
            meta = contract.checked_model(
                self.workload, self.workload.build_model(cfg.preset, "meta")
            )
            check_data(cfg, self.workload.data_sources(), self.workload.data_fields)
        else:
            meta = contract.checked_model(self.workload, model)
        names = tuple(contract.checked_regions(self.workload, meta, self.workload.regions(meta)))
        check_compatible(cfg, machine, names)
        del meta

        if model is None:
            torch.manual_seed(
                cfg.seed
            )  # same initial weights on every rank and in every configuration
            model = contract.checked_model(
                self.workload, self.workload.build_model(cfg.preset, self.device)
            )
        self.model = model.to(self.device)
        self.workload.apply_model_options(
            self.model, cfg.model
        )  # before compile: it traces what they choose
        self.model.train()
        self.regions = contract.checked_regions(
            self.workload, self.model, self.workload.regions(self.model)
        )
        blocks = contract.checked_blocks(self.workload, self.model, self.regions)
        knobs.apply_trainability(self.regions, cfg)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        precision.apply_precision(
            self.regions, cfg.precision, self.device, graphs=cfg.graphs.enabled
        )
        self.workload.prepare_model(self.model)  # copies of frozen weights, in the dtype just set
        # before anything captures or traces the weights: their dtype is part of what is captured
        self.masters = (
            optim_master.bf16_with_masters(
                precision.autocast_only_params(self.regions, cfg.precision)
            )
            if cfg.optimizer.impl == "master"
            else {}
        )
        knobs.apply_checkpointing(blocks, cfg.checkpointing.regions, cfg.checkpointing.every)
        knobs.apply_compile(self.model, blocks, cfg.compile)
        self.split = self._loss_split() if cfg.optimizer.overlap else None
        # a context manager per use: torch's sdpa_kernel is a generator context manager, good for one entry
        self.attention = functools.partial(knobs.attention_context, cfg.kernels.attention)
        # Different randomness per rank (noise, times, dropout), as in data-parallel training.
        torch.manual_seed(cfg.seed * 1000 + rank + 1)

        self.scaler = (
            torch.amp.GradScaler(self.device.type)
            if precision.needs_scaler(cfg.precision)
            else None
        )
        step_graph = cfg.graphs.mode == "step"
        if cfg.graphs.mode == "regions":
            with cost.part("capture"):
                self._capture_regions()
        self.ddp = None
        self.reducer = None
        if step_graph and world_size > 1:
            # several ranks: gradients in flat buffers, all-reduced in buckets. One rank needs none of it
            # (see _capture_step)
            self.reducer = distributed.FlatGradReducer(
                self.params, cfg.ddp, world_size, overlap=cfg.ddp.graph_overlap
            )
        elif world_size > 1:
            self.ddp = distributed.wrap_ddp(self.model, cfg.ddp, self.device)
        self.optimizer, self.schedule = self._optimizer(step_graph)
        self._graph: graphs.StepGraph | graphs.OverlapStepGraph | None = None
        self._eager_steps = 0

    def weights_loaded(self) -> None:
        """Weights were copied into the built model (``--init-from``): layers that keep copies of frozen
        weights refresh them, in place (the frozen fp8 layers their fp8 weights too), and so does an
        optimizer with copies of the trainable ones."""
        self.workload.prepare_model(self.model)
        precision.refresh_frozen_fp8(self.model)
        self.trainable_loaded()

    def trainable_loaded(self) -> None:
        """The trainable weights were overwritten in place (a checkpoint's): an optimizer that keeps
        its own copies of them (``optimizer.offload``: on the host) takes their values."""
        refresh = getattr(self.optimizer, "weights_loaded", None)
        if refresh is not None:
            refresh()

    def _optimizer(
        self, capturable: bool
    ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
        """AdamW at ``cfg.optimizer`` over the workload's groups and its schedule; or the workload's own
        optimizer (``Workload.optimizer``: the user's, through ``autotune.api``) rebuilt with the knob's kernels."""
        own = getattr(self.workload, "optimizer", None)
        if own is not None:
            opt = optim.rebuild_optimizer(
                own,
                self.cfg.optimizer.impl,
                capturable=capturable,
                masters=self.masters,
                offload=self.cfg.optimizer.offload,
                exp_avg_dtype=self.cfg.optimizer.exp_avg_dtype,
            )
            return opt, torch.optim.lr_scheduler.LambdaLR(
                opt, lambda step: 1.0
            )  # its rates, as the user set them
        groups = self.workload.param_groups(self.model, self.cfg.optimizer.weight_decay)
        opt = optim.build_optimizer(
            groups, self.cfg.optimizer, capturable=capturable, masters=self.masters
        )
        return opt, optim.build_schedule(opt, self.cfg.optimizer)

    def _loss_split(self) -> LossSplit:
        """The workload's loss as a frozen prefix and the rest (``optimizer.overlap``), each compiled
        as a whole where the whole model is (they are what the steps call then)."""
        split = self.workload.split_loss(self.model)
        if split is None:
            raise IncompatibleConfigError(
                f"optimizer.overlap: refused: workload {self.workload.name!r} does not split "
                "its loss into a frozen prefix and the rest (Workload.split_loss)"
            )
        trained = [
            n
            for n in split.regions
            if any(p.requires_grad for m in self.regions[n] for p in m.parameters())
        ]
        if trained:
            raise IncompatibleConfigError(
                f"optimizer.overlap: refused: the prefix's regions {trained} train "
                "(model.unfreeze), and the update beside it would write the weights it reads"
            )
        if "all" in self.cfg.compile.regions:
            kwargs = knobs.compile_kwargs(self.cfg.compile)
            split = LossSplit(
                torch.compile(split.prefix, **kwargs),
                torch.compile(split.rest, **kwargs),
                split.regions,
            )
        return split

    # -- eager and region-graph steps -------------------------------------------------------
    def _prefix(self, batch: Batch):
        with self.attention(), torch.no_grad():
            return self.split.prefix(batch)

    def _forward(self, batch: Batch) -> torch.Tensor:
        if self.split is not None:
            carry = self._prefix(batch)
            with self.attention():
                return contract.checked_loss(self.workload, self.split.rest(carry, batch))
        with self.attention():
            loss = self.workload.loss(self.ddp if self.ddp is not None else self.model, batch)
        return contract.checked_loss(self.workload, loss)

    def _eager_step(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        if self.reducer is not None:
            self.reducer.begin()
        clip = self.cfg.optimizer.grad_clip
        loss = self._backward(batch)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
            norm = optim.clip_and_norm(self.params, clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            if self.reducer is not None:
                self.reducer()
            norm = optim.clip_and_step(self.optimizer, self.params, clip)
        if self.reducer is None:
            self.optimizer.zero_grad(set_to_none=True)
        self.schedule.step()
        return loss, norm.detach()

    def _backward(self, batch: Batch) -> torch.Tensor:
        """Forward and backward of the update's batch, as ``memory.accumulation_steps`` micro-batches
        whose losses are weighted by their share of the batch (``accumulate.shares``: the gradients
        sum to the whole batch's); the whole batch's loss. With DDP only the last micro-batch's
        backward all-reduces."""
        parts = accumulate.micro_batches(batch, self.accumulation)
        if len(parts) == 1:
            loss = self._forward(batch)
            (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
            return loss.detach()
        total = None
        for i, (part, share) in enumerate(zip(parts, accumulate.shares(self.workload, parts))):
            last = i == len(parts) - 1
            quiet = self.ddp.no_sync() if self.ddp is not None and not last else None
            with quiet or contextlib.nullcontext():
                scaled = self._forward(part) * share
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            total = scaled.detach() if total is None else total + scaled.detach()
        return total

    def _capture_regions(self) -> None:
        gen = torch.Generator().manual_seed(self.cfg.seed)
        sample = contract.checked_batch(
            self.workload,
            self.workload.synthetic_batch(self.cfg.preset, self.micro_batch, self.device, gen),
            "synthetic_batch",
        )
        modules = [m for name in self.cfg.graphs.regions for m in self.regions[name]]
        state = torch.cuda.get_rng_state(self.device)

        def run() -> None:
            with self.attention():
                self.workload.loss(self.model, sample)

        recorded = graphs.record_region_inputs(self.model, modules, run)
        graphs.graph_regions(recorded, self.cfg.graphs.warmup_steps)
        torch.cuda.set_rng_state(state, self.device)
        self.model.zero_grad(set_to_none=True)

    # -- whole-step graph ---------------------------------------------------------------------
    def _capture_step(self, batch: Batch) -> None:
        static = {k: v.clone() for k, v in batch.items()}
        clip = self.cfg.optimizer.grad_clip

        inside = self.reducer is not None and self.reducer.overlap
        # The gradients are None when the backward is captured, so it writes them (autograd takes the
        # incoming gradient as the parameter's) into the graph's pool, where each replay writes them
        # again: no zeroing and no accumulating add (several ranks: the reducer's hooks copy them into
        # its buckets). Into kept buffers every step zeroes 6.5 GB of fp32 gradients and adds each new
        # gradient to them: in the trace of a 1-GPU step graph of `full` on an H200, 585 float-add
        # kernels a step (517 trainable tensors) took 5.3 ms; without them the step went from 87.5 to
        # 79.2 ms.
        if self.reducer is None:
            self.optimizer.zero_grad(set_to_none=True)

        def forward_backward(b: Batch) -> torch.Tensor:
            if self.reducer is None:
                # one rank: the micro-batches of memory.accumulation_steps captured one after the
                # other (views of the static batch, device-side shares): the first backward writes
                # each gradient, the later ones add to it, on every replay as in the capture
                return self._backward(b)
            self.reducer.begin()
            loss = self._forward(b)
            loss.backward()
            if (
                inside
            ):  # the buckets' all-reduces, started by the backward's hooks, captured with it
                self.reducer()
            return loss.detach()

        def update() -> torch.Tensor:
            return optim.clip_and_step(self.optimizer, self.params, clip).detach()

        if self.split is not None:
            self._graph = self._overlap_graph(static, clip)
            return
        reduce = self.reducer if self.world > 1 and not inside else None
        # an optimizer that reads the gradients through tables of their addresses (MasterAdamW) builds
        # them once the captured backward has placed the gradients
        prepare = getattr(self.optimizer, "prepare", None)
        self._graph = graphs.StepGraph(forward_backward, update, static, reduce, prepare)

    def _overlap_graph(self, static: Batch, clip: float) -> graphs.OverlapStepGraph:
        """``optimizer.overlap``: the prefix, the rest with its backward and gradient norm, and the
        update, as three graphs (:class:`graphs.OverlapStepGraph`)."""
        opt = self.optimizer

        def rest(carry, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
            with self.attention():
                loss = contract.checked_loss(self.workload, self.split.rest(carry, b))
            loss.backward()
            return loss.detach(), opt.prepare_update(clip).detach()

        return graphs.OverlapStepGraph(
            self._prefix,
            rest,
            opt.apply_update,
            static,
            opt.prepare,
            sm_carveout=self.cfg.optimizer.overlap_sm_carveout,
        )

    def flush(self) -> None:
        """Apply an update that ``optimizer.overlap`` still holds for the next step (before the weights
        or the optimizer's state are read: a checkpoint, the end of training)."""
        if isinstance(self._graph, graphs.OverlapStepGraph):
            self._graph.flush()

    def step(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """One training step on a device batch; returns (loss, grad norm) as device tensors."""
        if self.cfg.graphs.mode != "step":
            return self._eager_step(batch)
        if self._graph is None and self._eager_steps < self.cfg.graphs.warmup_steps:
            # Warm-up steps are real training steps, run eagerly on a side stream so that the
            # optimizer state and the allocator's pools exist before capture.
            self._eager_steps += 1
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream), capture_path():
                out = self._eager_step(batch)
            torch.cuda.current_stream().wait_stream(stream)
            return out
        if self._graph is None:
            with cost.part("capture"), capture_path():
                self._capture_step(batch)
        loss, norm = self._graph(batch)
        self.schedule.step()
        return loss.clone(), norm.clone()

    def batches(self, loader) -> Iterator[Batch]:
        """Device batches from a host loader (through the device prefetcher when configured).

        The seconds each host batch took to make in its worker (``LOAD_KEY``, summed over its
        samples) are taken out of the batch and appended to ``self.load_times``.
        """
        depth = self.cfg.data.device_prefetch
        host = self._untimed(loader)
        if depth > 0 and self.device.type == "cuda":
            from autotune.data import DevicePrefetcher

            yield from DevicePrefetcher(host, self.device, depth)
            return
        for batch in host:
            with torch.profiler.record_function("autotune.h2d"):
                yield to_device(batch, self.device)

    def _untimed(self, loader) -> Iterator:
        from autotune.data.loader import LOAD_KEY

        for batch in contract.epochs(self.workload, loader):
            if LOAD_KEY in batch:
                self.load_times.append(float(batch.pop(LOAD_KEY).sum()))
            yield batch

    def close(self) -> None:
        with contextlib.suppress(Exception):
            del self._graph
