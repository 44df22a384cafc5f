"""What the GR00T workloads (N1.6, N1.7) do alike: a preset fitted to the run's dataset, the
batch of ``batch.py``, the loss split at the frozen backbone, the LeRobot data path, the counts.

A subclass names its model's package (``package``) and model class (``model_class``); the package's
modules give the parts by name: ``presets.get_preset``, ``fit.fit_preset`` and ``fit.describe_fit``,
``model.<model_class>`` (with ``region_map``, ``frozen_prefix``, ``forward_from``, ``PREFIX_REGIONS``
and ``configure``), ``data.build_loader`` and ``flops.spec_modules`` (parameter counts by the rows of
its spec). They are imported when first used, so that importing the workload (which every trial
process does) loads neither the data layer nor the model.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from autotune.config import TrainConfig
from autotune.config.stock import stock_config
from autotune.errors import IncompatibleConfigError
from autotune.workloads.base import Batch, LossSplit, Workload
from autotune.workloads.gr00t_common import batch as batch_mod

if TYPE_CHECKING:
    from autotune.config import DataConfig, ModelConfig


class Gr00tWorkload(Workload):
    """A GR00T replica as a workload; the inputs of a preset follow the run's dataset: ``fit_data``
    fits the preset to it, and every method then builds, feeds and counts the fitted preset."""

    default_preset = "full"
    cpu_preset = "tiny"
    data_fields = ("dataset", "episodes", "video_backend")

    package: ClassVar[str]
    """The model's package, e.g. ``autotune.workloads.gr00t_n16``."""
    model_class: ClassVar[str]
    """The name of the model's class in ``<package>.model``."""

    def apply_model_options(self, model: nn.Module, options: ModelConfig) -> None:
        # the model's configure takes each declared knob (``model_knobs``) by its name
        if options.options is None:
            return
        trained = [r for r in options.unfreeze if r in model.PREFIX_REGIONS]
        if getattr(options.options, "frozen_prefix_no_grad", False) and trained:
            raise IncompatibleConfigError(
                f"model.frozen_prefix_no_grad: refused: model.unfreeze trains {trained}, which the "
                "frozen prefix runs without gradients; set it false or leave those regions frozen"
            )
        model.configure(**dataclasses.asdict(options.options))

    def part(self, module: str, name: str) -> Any:
        """``name`` of the model package's ``module`` (imported on first use)."""
        return getattr(importlib.import_module(f"{self.package}.{module}"), name)

    def get_preset(self, name: str) -> Any:
        """The preset ``name`` as defined (an unknown name lists the known ones)."""
        return self.part("presets", "get_preset")(name)

    def __init__(self) -> None:
        self._fitted: dict[str, Any] = {}
        self._flops: dict[tuple[Any, bool], float] = {}
        self._said: set[str] = set()

    def resolve(self, preset: str):
        """``preset`` as fitted to the dataset of the last ``fit_data``, else as defined."""
        return self._fitted.get(preset) or self.get_preset(preset)

    def fit_data(self, preset: str, data: DataConfig) -> None:
        """Fit ``preset`` to ``data.dataset`` (a null dataset is made to the preset: nothing to fit)."""
        self._fitted.pop(preset, None)
        if (
            data.source not in (None, "lerobot") or not data.dataset
        ):  # null: the first source, lerobot
            return
        from autotune.data import load_meta
        from autotune.workloads.gr00t_common.data import embodiment_slot

        meta = load_meta(data.dataset)
        base = self.get_preset(preset)
        fitted = self.part("fit", "fit_preset")(base, meta)
        # the projector slot too, before a model is built (the dataset checks it again)
        embodiment_slot(meta, self.part("data", "PROJECTOR_INDEX"), fitted)
        self._fitted[preset] = fitted
        note = self.part("fit", "describe_fit")(base, fitted, meta.root)
        for line in (*meta.notices, note):
            if line and line not in self._said:  # once per process
                self._said.add(line)
                print(f"autotune: note: {line}", file=sys.stderr)

    def data_folder(self, preset: str, data: DataConfig) -> Path | None:
        """``data.dataset``, or where null the dataset made for the preset in the cache (made now
        if it is not there: the first trial would make it)."""
        if data.source not in (None, "lerobot"):
            return None
        from autotune.data.loader import dataset_root

        return dataset_root(data, self.part("data", "read_spec")(self.get_preset(preset)))

    def build_model(self, preset: str, device: str | torch.device = "cpu") -> nn.Module:
        return self.part("model", self.model_class)(self.resolve(preset), device=device)

    def regions(self, model: nn.Module) -> dict[str, list[nn.Module]]:
        return model.region_map()

    def blocks(self, model: nn.Module) -> dict[str, list[nn.Module]]:
        """A block stack (a tower, the LLM, the adapter, the DiT) by its blocks; any other module whole."""
        from autotune.workloads.gr00t_common.layers import BlockStack

        return {
            name: [b for m in modules for b in (m.blocks if isinstance(m, BlockStack) else [m])]
            for name, modules in self.regions(model).items()
        }

    def data_sources(self) -> tuple[str, ...]:
        return ("lerobot", "synthetic")

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return model(batch)

    def loss_weight(self, batch: Batch) -> torch.Tensor:
        """The loss is a mean over the action mask's set entries: their count."""
        return batch["action_mask"].to(torch.float32).sum()

    def split_loss(self, model: nn.Module) -> LossSplit:
        """The frozen backbone (``model.frozen_prefix``), then the rest (``model.forward_from``)."""
        return LossSplit(model.frozen_prefix, model.forward_from, model.PREFIX_REGIONS)

    def synthetic_batch(self, preset, batch_size, device, generator=None) -> Batch:
        return batch_mod.synthetic_batch(self.resolve(preset), batch_size, device, generator)

    def make_loader(self, preset: str, data: DataConfig, batch_size: int, *, seed: int, rank: int = 0,
                    world_size: int = 1) -> Iterable[Batch]:  # fmt: skip
        if data.source == "synthetic":
            return super().make_loader(
                preset, data, batch_size, seed=seed, rank=rank, world_size=world_size
            )
        build = self.part("data", "build_loader")
        return build(
            self.resolve(preset), data, batch_size, seed=seed, rank=rank, world_size=world_size
        )

    def stock_config(self, preset: str) -> TrainConfig:
        """Upstream's fine-tuning defaults (``autotune.config.stock``; N1.7's training configuration
        keeps N1.6's: bf16 autocast + TF32, frozen weights in bf16 and trainable ones in fp32, AdamW at
        lr 1e-4, cosine, 5 % warm-up, weight decay 1e-5, 2 loader workers, no compile, no
        checkpointing); 2 samples a step for ``tiny``."""
        cfg = stock_config(self.name, preset)
        if preset == "tiny":
            cfg.batch_size = 2
        return cfg

    def tokens_per_sample(self, preset: str) -> int:
        return self.resolve(preset).seq_len

    def flops_per_sample(self, preset: str) -> float:
        """The upstream step's FLOPs, the discarded LM-head logits included."""
        return self._count(preset, useful=False)

    def useful_flops_per_sample(self, preset: str) -> float:
        """The FLOPs that reach the loss or a gradient: the step with its dead work skipped and the
        cross-attention's keys and values only for the tokens it attends to."""
        return self._count(preset, useful=True)

    def region_trains(self, preset: str) -> dict[str, bool]:
        """As the base class finds them, kept on disk with the FLOP counts (the model's source in the key)."""
        from autotune.workloads.gr00t_common.flops import cached_region_trains

        return cached_region_trains(self, preset)

    def _count(self, preset: str, *, useful: bool) -> float:
        key = (self.resolve(preset), useful)
        if key not in self._flops:
            from autotune.workloads.gr00t_common.flops import cached_total

            self._flops[key] = cached_total(self, preset, useful=useful)
        return self._flops[key]

    def describe(self, preset: str) -> dict[str, Any]:
        from autotune.workloads.gr00t_common.flops import describe

        return describe(self, preset, self.part("flops", "spec_modules"))
