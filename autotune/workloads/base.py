"""The workload interface: what the tuner needs from a training job.

A workload is a training job the tuner can build, feed, step and measure. Implement
:class:`Workload` and give it to the tuner by name: register it in code
(:func:`autotune.workloads.register_workload`), or name it on the command line as
``path/to/file.py:Class`` or ``package.module:Class`` (README, "Your own workload").

Contract (a method that breaks it fails with one line naming the method and the rule)
-----------------------------------------------------------------------------------
* ``build_model(preset, device)`` returns the model with every floating parameter in fp32 on
  ``device`` (``"meta"`` must work: ``inspect`` and the search build it there), frozen parameters
  with ``requires_grad=False``. Precision, compilation, checkpointing and graph capture are applied
  afterwards by autotune through the region map, never by the workload.
* ``regions(model)`` maps each region name (an identifier; not ``all`` nor ``other``) to the
  callable modules it owns: disjoint, each a module of the model. Their forwards may take keyword
  arguments and return tensors, tuples or ``ModelOutput``s. Parameters outside every region belong
  to ``"other"`` and stay fp32.
* ``blocks(model)`` maps each region to the units it is compiled and checkpointed by, block by
  block (the default: the region's own modules, so a region listing its transformer layers one by
  one is compiled and checkpointed layer by layer).
* ``loss(model, batch)`` returns the scalar training loss of one batch, drawing the step's
  randomness (noise, dropout) from torch's generator on the batch's device, so that it stays random
  inside a captured CUDA graph. It must not synchronise the host, and it computes no cache (call a
  Hugging Face model with ``use_cache=False``).
* ``synthetic_batch(preset, batch_size, device, generator)`` returns a batch (a dict of tensors) of
  the exact shapes and dtypes the data path produces, for measurements without I/O.
* ``dataset(preset, data, seed=, rank=, world_size=)`` returns a ``torch.utils.data`` dataset of
  samples, each a dict of tensors: map-style (autotune shuffles and shards it by rank) or iterable
  (it shards itself by ``rank`` and by ``torch.utils.data.get_worker_info()``). Autotune builds the
  loader with the ``data`` knobs, re-iterates it epoch after epoch and times every batch in its
  worker (``autotune.data.torch_loader``). ``collate(samples)`` makes a batch of samples (default:
  ``torch.utils.data.default_collate``). Without ``dataset`` the workload trains on synthetic
  batches; a workload may instead override ``make_loader`` and return any re-iterable of batches
  (finite ones are re-iterated as epochs), whose load time autotune then cannot measure.
* ``fit_data(preset, data)`` is called before ``build_model`` with the run's ``DataConfig``; a
  workload whose inputs follow its dataset (GR00T N1.6: the dataset's views and frame size) fits
  ``preset`` to it there, and every method then uses the fitted shapes. Default: nothing.
* ``flops_per_sample(preset)`` counts the floating-point operations of one sample's training
  step (forward and backward) as the workload's reference implementation runs it, for MFU;
  ``useful_flops_per_sample(preset)`` counts only those whose results reach the loss or a
  gradient (the default: all of them). MFU is reported by both counts.
* ``apply_model_options(model, options)`` applies the workload's own ``model`` knobs, declared
  in its package and registered by name (:mod:`autotune.config.workload_knobs`): they change how
  the model computes, never what. A workload that declares none gets none (the configuration
  refuses them as unknown keys).
* ``split_loss(model)`` (optional) returns ``LossSplit(prefix, rest, regions)`` where
  ``loss(model, batch) == rest(prefix(batch), batch)`` and ``prefix`` runs only the named regions
  (the frozen towers of a model that trains its head): ``optimizer.overlap`` runs the optimizer's
  update beside the next step's ``prefix``, which must read none of the weights it writes. The
  default, None, refuses that knob.
* ``stock_config(preset)`` is the configuration a user of the workload trains with before tuning
  (what every speed-up is measured against), and carries the optimizer's hyper-parameters, which
  tuning never changes. The default is plain PyTorch: fp32, AdamW (torch's for-each kernels) at
  :meth:`optimizer_config`, a DataLoader with torch's defaults.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from autotune.config import DataConfig, ModelConfig, OptimizerConfig, PrecisionConfig, TrainConfig

Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class LossSplit:
    """A workload's loss in two parts (``Workload.split_loss``): ``rest(prefix(batch), batch)``."""

    prefix: Callable[[Batch], Any]
    """The forward's first part; runs only the modules of ``regions``, and has no backward."""
    rest: Callable[[Any, Batch], torch.Tensor]
    """The loss from the prefix's output and the batch."""
    regions: tuple[str, ...]


class Workload(ABC):
    """A training job the tuner can build and measure (see the module docstring)."""

    model_knobs: type | None = None
    """The dataclass of the workload's own ``model`` knobs (fields made by
    :func:`autotune.config.knob.knob`), applied by :meth:`apply_model_options`; None: it has none."""

    name: ClassVar[str]
    presets: ClassVar[tuple[str, ...]]
    default_preset: ClassVar[str]
    cpu_preset: ClassVar[str | None] = None
    """The preset used without a GPU when none is asked for (None: ``default_preset``)."""
    data_fields: ClassVar[tuple[str, ...]] = ()
    """The fields of ``data`` naming the workload's own data that it reads (``dataset``,
    ``episodes``, ``video_backend``); a configuration setting any other is refused."""

    @abstractmethod
    def build_model(self, preset: str, device: str | torch.device = "cpu") -> nn.Module:
        """The model of ``preset`` in fp32 on ``device``, frozen parameters not requiring grad."""

    @abstractmethod
    def regions(self, model: nn.Module) -> dict[str, list[nn.Module]]:
        """Named, disjoint groups of callable modules that knobs address."""

    def region_trains(self, preset: str) -> dict[str, bool]:
        """Each region of ``preset``'s model, in the region map's order, and whether any of its
        parameters trains. Default: the model built on the meta device and asked."""
        model = self.build_model(preset, "meta")
        return {
            name: any(p.requires_grad for m in mods for p in m.parameters())
            for name, mods in self.regions(model).items()
        }

    @abstractmethod
    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Scalar loss of one batch; draws its randomness on the batch's device."""

    def loss_weight(self, batch: Batch) -> torch.Tensor | None:
        """How much ``batch`` weighs in a loss averaged over several batches: the denominator of its
        mean (e.g. the count of unmasked targets), so that micro-batches of one update
        (``memory.accumulation_steps``) combine to the loss of the whole batch. None: the loss is a
        mean over samples, and equal micro-batches weigh the same."""
        return None

    @abstractmethod
    def synthetic_batch(
        self,
        preset: str,
        batch_size: int,
        device: str | torch.device,
        generator: torch.Generator | None = None,
    ) -> Batch:
        """A random batch with the shapes and dtypes of the real data."""

    @abstractmethod
    def flops_per_sample(self, preset: str) -> float:
        """Floating-point operations of one sample's forward and backward."""

    def fit_data(self, preset: str, data: DataConfig) -> None:
        """Fit ``preset``'s inputs to the dataset of ``data`` before the model is built (see above)."""
        return None

    def useful_flops_per_sample(self, preset: str) -> float:
        """FLOPs of one sample's step whose results reach the loss or a gradient (no dead work)."""
        return self.flops_per_sample(preset)

    def split_loss(self, model: nn.Module) -> LossSplit | None:
        """The loss as a frozen prefix and the rest (see the module docstring); None: no split."""
        return None

    def apply_model_options(self, model: nn.Module, options: ModelConfig) -> None:
        """Apply the workload's own ``model`` knobs (``options.options``, the dataclass it declared with
        :func:`autotune.config.workload_knobs.register_model_knobs`) to a built model. Default: a
        workload that declares none has none to apply."""
        return None

    def prepare_model(self, model: nn.Module) -> None:
        """Called once the model's weights have their final dtype and device, before anything compiles
        or captures it: layers that keep a derived copy of frozen weights make it here. Default: nothing."""
        return None

    def dataset(
        self, preset: str, data: DataConfig, *, seed: int, rank: int = 0, world_size: int = 1
    ) -> torch.utils.data.Dataset | None:
        """The workload's own samples (see the module docstring); None: synthetic batches only."""
        return None

    def data_folder(self, preset: str, data: DataConfig) -> Path | None:
        """The dataset folder the workload's loader reads for ``data`` (None: synthetic batches or
        data that is not a folder), for saying which data a run trained on. Default: ``data.dataset``."""
        if data.source == "synthetic" or not data.dataset:
            return None
        return Path(data.dataset)

    def collate(self, samples: list[Any]) -> Batch:
        """One batch of ``samples`` (runs in the loader's workers)."""
        return torch.utils.data.default_collate(samples)

    def data_sources(self) -> tuple[str, ...]:
        """Names ``data.source`` may take, the workload's own data first; ``synthetic`` is always one."""
        own = (
            type(self).dataset is not Workload.dataset
            or type(self).make_loader is not Workload.make_loader
        )
        return ("dataset", "synthetic") if own else ("synthetic",)

    def make_loader(
        self,
        preset: str,
        data: DataConfig,
        batch_size: int,
        *,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> Iterable[Batch]:
        """Host batches: of :meth:`dataset` through autotune's loader, or synthetic ones."""
        if data.source != "synthetic" and type(self).dataset is not Workload.dataset:
            from autotune.data.torch_loader import dataset_loader
            from autotune.workloads.contract import broken

            ds = self.dataset(preset, data, seed=seed, rank=rank, world_size=world_size)
            if ds is None:
                raise broken(
                    self, "dataset", "returned None; it must return a torch.utils.data dataset"
                )
            return dataset_loader(
                ds,
                data,
                batch_size,
                seed=seed,
                rank=rank,
                world_size=world_size,
                collate=self.collate,
            )
        from autotune.workloads.synthetic import SyntheticLoader

        return SyntheticLoader(self, preset, batch_size, seed=seed + rank)

    def blocks(self, model: nn.Module) -> dict[str, list[nn.Module]]:
        """The units each region is compiled and checkpointed by (default: its modules)."""
        return self.regions(model)

    def optimizer_config(self, preset: str) -> OptimizerConfig:
        """The optimizer's hyper-parameters: torch's AdamW defaults, a constant rate, no clipping."""
        return OptimizerConfig(
            lr=1e-3, weight_decay=1e-2, warmup_ratio=0.0, schedule="constant", grad_clip=0.0
        )

    def stock_config(self, preset: str) -> TrainConfig:
        """The configuration of an untuned training job (see the module docstring)."""
        return TrainConfig(
            workload=self.name, preset=preset,
            precision=PrecisionConfig(default="fp32", tf32=False, frozen_dtype="fp32"),
            data=DataConfig(source=self.data_sources()[0], num_workers=0, pin_memory=False, persistent_workers=False),
            optimizer=self.optimizer_config(preset),
        )  # fmt: skip

    def preset_for(self, cuda: bool) -> str:
        """The preset used when none is asked for: ``default_preset``, or ``cpu_preset`` without a GPU."""
        return self.default_preset if cuda or self.cpu_preset is None else self.cpu_preset

    def tokens_per_sample(self, preset: str) -> int:
        """Tokens one sample contributes to tokens/s (the sequence the backbone processes)."""
        return 1

    def param_groups(self, model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
        """AdamW groups: decay on weight matrices, none on biases and norms (ndim <= 1)."""
        decay, no_decay = [], []
        for _, p in model.named_parameters():
            if p.requires_grad:
                (decay if p.ndim >= 2 else no_decay).append(p)
        groups = [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        return [g for g in groups if g["params"]]

    def check_preset(self, preset: str) -> None:
        from autotune.errors import WorkloadError

        if preset not in self.presets:
            raise WorkloadError(
                f"preset {preset!r} of workload {self.name!r} is unknown; known presets: {list(self.presets)}"
            )
