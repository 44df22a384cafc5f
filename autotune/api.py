"""best.yaml in your own training loop: ``autotune.prepare`` applies every knob of a configuration to
a model you built::

    import autotune

    run = autotune.prepare("runs/.../best.yaml", model, dataset=my_dataset,
                           loss_fn=lambda model, batch: model(**batch).loss)
    for step, batch in zip(range(1000), run.loader):
        loss = run.step(batch)          # forward, backward, clipping, optimizer (and schedule) step

The knobs are applied exactly as ``autotune train`` applies them: precision per region (autocast,
parameter dtypes), activation checkpointing and ``torch.compile`` per region or of the whole model,
CUDA graphs of regions or of the whole step, DDP (under ``torchrun``) or the in-graph reducer, the
attention backend, the optimizer's kernels, and the loader knobs on ``dataset``. The regions,
blocks and loss come from the configuration's workload when it is registered (a model of the
same kind: the regions name its modules), else from ``regions=`` and ``loss_fn=``. Without
``optimizer=`` the optimizer is AdamW at the configuration's hyper-parameters with its schedule;
with one (a fresh ``torch.optim`` optimizer), it is rebuilt with the configured kernels and keeps
its own rates. Seeding follows ``autotune train``: the randomness of the steps is seeded from
``config.seed`` and the rank, so a loop over the same model, data and configuration trains as
``autotune train`` does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from autotune.config import TrainConfig, load_config
from autotune.config.named import naming_file
from autotune.errors import ConfigError, WorkloadError
from autotune.workloads.base import Batch, Workload
from autotune.workloads.registry import get_workload

LossFn = Callable[[nn.Module, Batch], torch.Tensor]


class _UserJob(Workload):
    """The user's model seen through the workload interface: their loss, regions, blocks, optimizer."""

    name = "user"
    presets = ()
    default_preset = ""

    def __init__(
        self,
        base: Workload | None,
        loss_fn: LossFn | None,
        regions: dict | None,
        blocks: dict | None,
        sample: Batch | None,
        optimizer: torch.optim.Optimizer | None,
    ) -> None:
        self.base, self._loss, self._regions, self._blocks = base, loss_fn, regions, blocks
        self._sample, self.optimizer = sample, optimizer
        self.name = base.name if base is not None else "user"

    def build_model(self, preset, device="cpu"):
        raise WorkloadError("autotune.prepare: the model is the one you passed; none is built")

    def regions(self, model: nn.Module) -> dict[str, list[nn.Module]]:
        if self._regions is not None:
            return self._regions
        if self.base is None:
            return {"model": [model]}
        return self._from_base(self.base.regions, model, "regions")

    def blocks(self, model: nn.Module) -> dict[str, list[nn.Module]]:
        if self._blocks is not None:
            return self._blocks
        if self.base is not None and self._regions is None:
            return self._from_base(self.base.blocks, model, "blocks")
        return self.regions(model)

    def _from_base(self, read: Callable, model: nn.Module, what: str) -> dict[str, list[nn.Module]]:
        """The registered workload's map of ``model``; a model of another kind has no such map."""
        try:
            return read(model)
        except (AttributeError, KeyError, IndexError, TypeError) as exc:
            raise WorkloadError(
                f"autotune.prepare: the model ({type(model).__name__}) has no {what} map of workload "
                f"{self.base.name!r} ({type(exc).__name__}: {exc}); pass regions= (and blocks=) naming its "
                "modules, e.g. regions={'model': [model]}"
            ) from None

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return self._loss(model, batch) if self._loss is not None else self.base.loss(model, batch)

    def synthetic_batch(self, preset, batch_size, device, generator=None) -> Batch:
        if self._sample is not None:
            return {k: v.to(device) for k, v in self._sample.items()}
        if self.base is None:
            raise WorkloadError(
                "autotune.prepare: graphs.mode 'regions' captures from a sample batch; pass sample_batch="
            )
        return self.base.synthetic_batch(preset, batch_size, device, generator)

    def collate(self, samples):
        return self.base.collate(samples) if self.base is not None else super().collate(samples)

    def param_groups(self, model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
        return (
            self.base.param_groups(model, weight_decay)
            if self.base is not None
            else super().param_groups(model, weight_decay)
        )

    def flops_per_sample(self, preset: str) -> float:
        return 0.0


@dataclass
class Prepared:
    """A model with a configuration's knobs applied, its optimizer, its loader and its step."""

    model: nn.Module
    """The model you passed, the knobs applied (compiled, checkpointed, ... in place)."""
    optimizer: torch.optim.Optimizer
    loader: Any
    """Endless host batches of ``dataset`` with the loader knobs (None without a dataset)."""
    session: Any
    """The :class:`autotune.train.session.Session` that runs the steps."""

    def step(self, batch: Batch) -> torch.Tensor:
        """One training step on ``batch`` (host or device); returns the loss as a device tensor (no host sync)."""
        from autotune.data.loader import LOAD_KEY
        from autotune.train.session import to_device

        if not isinstance(batch, dict):
            raise WorkloadError(
                f"autotune.prepare: step() takes a batch as a dict of tensors (name -> tensor), not "
                f"a {type(batch).__name__}"
            )
        batch = {k: v for k, v in batch.items() if k != LOAD_KEY}
        loss, _norm = self.session.step(to_device(batch, self.session.device))
        return loss

    def batches(self) -> Iterator[Batch]:
        """Device batches of the loader, through the device prefetcher when the configuration has one."""
        if self.loader is None:
            raise ConfigError("autotune.prepare: no dataset was given, so there is no loader")
        return self.session.batches(self.loader)


def prepare(
    config: TrainConfig | str | os.PathLike,
    model: nn.Module,
    *,
    dataset: torch.utils.data.Dataset | None = None,
    loss_fn: LossFn | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    regions: dict[str, list[nn.Module]] | None = None,
    blocks: dict[str, list[nn.Module]] | None = None,
    sample_batch: Batch | None = None,
) -> Prepared:
    """Apply every knob of ``config`` (a :class:`TrainConfig` or a YAML path) to ``model`` (see the module docstring)."""
    from autotune.data.torch_loader import dataset_loader
    from autotune.train import distributed
    from autotune.train.session import Session

    _check_arguments(config, model, optimizer)
    cfg = config if isinstance(config, TrainConfig) else load_config(config)
    try:
        base = get_workload(cfg.workload)
    except WorkloadError:
        base = None
    if base is None and (loss_fn is None or (regions is None and _names_regions(cfg))):
        raise WorkloadError(
            f"autotune.prepare: workload {cfg.workload!r} is not registered; pass loss_fn= (and "
            "regions= for a configuration that names regions)"
        )
    job = _UserJob(base, loss_fn, regions, blocks, sample_batch, optimizer)
    rank, world, local = distributed.init_from_env()
    with naming_file(None if isinstance(config, TrainConfig) else config):
        session = Session(cfg, rank, world, local, model=model, workload=job)
    loader = None
    if dataset is not None:
        loader = dataset_loader(
            dataset,
            cfg.data,
            cfg.batch_size,
            seed=cfg.seed,
            rank=rank,
            world_size=world,
            collate=job.collate,
        )
    return Prepared(session.model, session.optimizer, loader, session)


def _check_arguments(config: object, model: object, optimizer: object) -> None:
    """Refuse arguments of another kind, and an optimizer of parameters the model has not: it was
    rebuilt over its own groups, and the steps trained another model's weights, never this one's."""
    if not isinstance(config, (TrainConfig, str, os.PathLike)):
        raise ConfigError(
            f"autotune.prepare: config is a {type(config).__name__}; give a TrainConfig or the path "
            "of a configuration YAML (a run's best.yaml)"
        )
    if not isinstance(model, nn.Module):
        raise WorkloadError(
            f"autotune.prepare: model is a {type(model).__name__}; give the torch.nn.Module you built"
        )
    if optimizer is None:
        return
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise WorkloadError(
            f"autotune.prepare: optimizer is a {type(optimizer).__name__}; give a fresh torch.optim "
            "optimizer over the model's parameters, or none (AdamW at the configuration's settings)"
        )
    mine = {id(p) for p in model.parameters()}
    foreign = sum(id(p) not in mine for g in optimizer.param_groups for p in g["params"])
    if foreign:
        raise WorkloadError(
            f"autotune.prepare: optimizer holds {foreign} parameter(s) that are not the model's (an "
            "optimizer of another model?); build it over model.parameters() of the model passed here"
        )


def _names_regions(cfg: TrainConfig) -> bool:
    return bool(
        cfg.precision.regions
        or cfg.graphs.regions
        or cfg.checkpointing.regions
        or [r for r in cfg.compile.regions if r != "all"]
    )
