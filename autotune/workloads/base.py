"""The workload interface: what the tuner needs from a training job.

A workload is a training job the tuner can build, feed, step and measure. Implement
:class:`Workload` and register it with :func:`autotune.workloads.register_workload`; the tuner
then addresses it by name (``--workload NAME``), exactly as it does the built-in ``gr00t_n16``.

Contract
--------
* ``build_model(preset, device)`` returns the model with every parameter in fp32 on ``device``
  (``"meta"`` must work: ``inspect`` builds the full size there), frozen parameters with
  ``requires_grad=False``. Precision, compilation and graph capture are applied afterwards by the
  training runner through the region map, never by the workload.
* ``regions(model)`` maps each region name to the modules it owns. Each module is a callable
  unit whose ``forward`` takes and returns tensors (so a region can be compiled, checkpointed or
  graph-captured module by module). Regions do not overlap; parameters outside every region
  belong to the region ``"other"``.
* ``loss(model, batch)`` returns the scalar training loss of one batch, drawing the step's
  randomness (noise, sampled times, dropout) from torch's generator on the batch's device, so
  that it stays random inside a captured CUDA graph. It must not synchronise the host.
* ``synthetic_batch(preset, batch_size, device, generator)`` returns a batch of the exact shapes
  and dtypes the data path produces, for measurements without I/O.
* ``fit_data(preset, data)`` is called before ``build_model`` with the run's ``DataConfig``; a
  workload whose inputs follow its dataset (GR00T N1.6: the dataset's views and frame size) fits
  ``preset`` to it there, and every method then uses the fitted shapes. Default: nothing.
* ``make_loader(...)`` returns an iterable of host batches (a ``torch.utils.data.DataLoader``
  over the workload's real data); the runner moves them to the device.
* ``flops_per_sample(preset)`` counts the floating-point operations of one sample's training
  step (forward and backward) as the workload's reference implementation runs it, for MFU;
  ``useful_flops_per_sample(preset)`` counts only those whose results reach the loss or a
  gradient (the default: all of them). MFU is reported by both counts.
* ``apply_model_options(model, options)`` applies the ``model`` knobs that change how the model
  computes, never what (``skip_dead_work``, ``category_matmul``); the default has nothing to skip
  and no per-category layers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

if TYPE_CHECKING:
    from autotune.config import DataConfig, ModelConfig

Batch = dict[str, torch.Tensor]


class Workload(ABC):
    """A training job the tuner can build and measure (see the module docstring)."""

    name: ClassVar[str]
    presets: ClassVar[tuple[str, ...]]
    default_preset: ClassVar[str]

    @abstractmethod
    def build_model(self, preset: str, device: str | torch.device = "cpu") -> nn.Module:
        """The model of ``preset`` in fp32 on ``device``, frozen parameters not requiring grad."""

    @abstractmethod
    def regions(self, model: nn.Module) -> dict[str, list[nn.Module]]:
        """Named, disjoint groups of callable modules that knobs address."""

    @abstractmethod
    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Scalar loss of one batch; draws its randomness on the batch's device."""

    @abstractmethod
    def synthetic_batch(
        self, preset: str, batch_size: int, device: str | torch.device, generator: torch.Generator | None = None
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

    def apply_model_options(self, model: nn.Module, options: ModelConfig) -> None:
        """Apply ``options.skip_dead_work`` and ``options.category_matmul`` to a built model.

        The default has no dead work (skipping it changes nothing) and no per-category layers: it
        refuses ``category_matmul: grouped`` rather than ignore it.
        """
        if options.category_matmul != "gather":
            from autotune.errors import IncompatibleConfigError

            raise IncompatibleConfigError(f"model.category_matmul: {options.category_matmul!r} is refused: workload "
                                          f"{self.name!r} has no per-category layers; allowed: 'gather'")

    def make_loader(
        self, preset: str, data: DataConfig, batch_size: int, *, seed: int, rank: int = 0, world_size: int = 1
    ) -> Iterable[Batch]:
        """Host batches of the workload's real data; the default yields synthetic batches."""
        from autotune.workloads.synthetic import SyntheticLoader

        return SyntheticLoader(self, preset, batch_size, seed=seed + rank)

    def tokens_per_sample(self, preset: str) -> int:
        """Tokens one sample contributes to tokens/s (the sequence the backbone processes)."""
        return 1

    def param_groups(self, model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
        """AdamW groups: decay on weight matrices, none on biases and norms (ndim <= 1)."""
        decay, no_decay = [], []
        for _, p in model.named_parameters():
            if p.requires_grad:
                (decay if p.ndim >= 2 else no_decay).append(p)
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        return [g for g in groups if g["params"]]

    def check_preset(self, preset: str) -> None:
        from autotune.errors import WorkloadError

        if preset not in self.presets:
            raise WorkloadError(f"preset {preset!r} of workload {self.name!r} is unknown; known presets: {list(self.presets)}")
