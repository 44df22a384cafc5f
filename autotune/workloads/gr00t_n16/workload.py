"""The ``gr00t_n16`` workload: binds the replica, its batch, its loss and its data path."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from autotune.config import TrainConfig
from autotune.config.stock import stock_config
from autotune.workloads.base import Batch, LossSplit, Workload
from autotune.workloads.gr00t_n16 import batch as batch_mod
from autotune.workloads.gr00t_n16.knobs import Gr00tModelKnobs
from autotune.workloads.gr00t_n16.presets import PRESETS, Gr00tPreset, get_preset

if TYPE_CHECKING:
    from autotune.config import DataConfig, ModelConfig

REGION_NAMES = ("vision", "connector", "llm_frozen", "llm_trainable", "vlln", "dit", "projectors")


class Gr00tN16(Workload):
    """GR00T N1.6: SigLIP2 vision, Qwen3 LLM (top 4 layers trained), alternating DiT action head.

    A preset's inputs follow the run's dataset: ``fit_data`` fits the preset to it (``fit.py``),
    and every method below then builds, feeds and counts the fitted preset.
    """

    name = "gr00t_n16"
    model_knobs = Gr00tModelKnobs
    presets = tuple(PRESETS)
    default_preset = "full"
    cpu_preset = "tiny"
    data_fields = ("dataset", "episodes", "video_backend")

    def __init__(self) -> None:
        self._fitted: dict[str, Gr00tPreset] = {}
        self._flops: dict[tuple[Gr00tPreset, bool], float] = {}
        self._said: set[str] = set()

    def resolve(self, preset: str) -> Gr00tPreset:
        """``preset`` as fitted to the dataset of the last ``fit_data``, else as defined."""
        return self._fitted.get(preset) or get_preset(preset)

    def fit_data(self, preset: str, data: DataConfig) -> None:
        """Fit ``preset`` to ``data.dataset`` (a null dataset is made to the preset: nothing to fit)."""
        self._fitted.pop(preset, None)
        if (
            data.source not in (None, "lerobot") or not data.dataset
        ):  # null: the first source, lerobot
            return
        from autotune.data import load_meta
        from autotune.workloads.gr00t_n16.fit import describe_fit, fit_preset

        meta = load_meta(data.dataset)
        base = get_preset(preset)
        self._fitted[preset] = fitted = fit_preset(base, meta)
        for line in (*meta.notices, describe_fit(base, fitted, meta.root)):
            if line and line not in self._said:  # once per process
                self._said.add(line)
                print(f"autotune: note: {line}", file=sys.stderr)

    def data_folder(self, preset: str, data: DataConfig) -> Path | None:
        """``data.dataset``, or where null the dataset made for the preset in the cache (made now
        if it is not there: the first trial would make it)."""
        if data.source not in (None, "lerobot"):
            return None
        from autotune.data.loader import dataset_root
        from autotune.workloads.gr00t_n16.data import read_spec

        return dataset_root(data, read_spec(get_preset(preset)))

    def build_model(self, preset: str, device: str | torch.device = "cpu") -> nn.Module:
        from autotune.workloads.gr00t_n16.model import Gr00tN16Model

        return Gr00tN16Model(self.resolve(preset), device=device)

    def regions(self, model: nn.Module) -> dict[str, list[nn.Module]]:
        return model.region_map()

    def blocks(self, model: nn.Module) -> dict[str, list[nn.Module]]:
        """A block stack (vision tower, LLM halves, DiT) by its blocks; any other module whole."""
        from autotune.workloads.gr00t_n16.layers import BlockStack

        return {
            name: [b for m in modules for b in (m.blocks if isinstance(m, BlockStack) else [m])]
            for name, modules in self.regions(model).items()
        }

    def data_sources(self) -> tuple[str, ...]:
        return ("lerobot", "synthetic")

    def stock_config(self, preset: str) -> TrainConfig:
        """The upstream fine-tuning defaults (``autotune.config.stock``); 2 samples a step for ``tiny``."""
        cfg = stock_config(self.name, preset)
        if preset == "tiny":
            cfg.batch_size = 2
        return cfg

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return model(batch)

    def split_loss(self, model: nn.Module) -> LossSplit:
        """vision -> connector -> frozen LLM layers, then the rest (``Gr00tN16Model.forward_from``)."""
        return LossSplit(model.frozen_prefix, model.forward_from, model.PREFIX_REGIONS)

    def synthetic_batch(self, preset, batch_size, device, generator=None) -> Batch:
        return batch_mod.synthetic_batch(self.resolve(preset), batch_size, device, generator)

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
        if data.source == "synthetic":
            return super().make_loader(
                preset, data, batch_size, seed=seed, rank=rank, world_size=world_size
            )
        from autotune.workloads.gr00t_n16.data import build_loader

        return build_loader(
            self.resolve(preset), data, batch_size, seed=seed, rank=rank, world_size=world_size
        )

    def tokens_per_sample(self, preset: str) -> int:
        return self.resolve(preset).seq_len

    def apply_model_options(self, model: nn.Module, options: ModelConfig) -> None:
        # the model takes each declared knob (Gr00tModelKnobs) by its name
        model.configure(**dataclasses.asdict(options.options))

    def prepare_model(self, model: nn.Module) -> None:
        model.prepare_fused_projections()

    def flops_per_sample(self, preset: str) -> float:
        """The upstream step's FLOPs, the discarded LM-head logits included."""
        return self._count(preset, useful=False)

    def useful_flops_per_sample(self, preset: str) -> float:
        """The FLOPs that reach the loss or a gradient: the step with its dead work skipped and the
        cross-attention's keys and values only for the tokens it attends to."""
        return self._count(preset, useful=True)

    def _count(self, preset: str, *, useful: bool) -> float:
        key = (self.resolve(preset), useful)
        if key not in self._flops:
            from autotune.workloads.gr00t_n16.flops import cached_total

            self._flops[key] = cached_total(self, preset, useful=useful)
        return self._flops[key]

    def describe(self, preset: str) -> dict[str, Any]:
        from autotune.workloads.gr00t_n16.flops import describe

        return describe(self, preset)
