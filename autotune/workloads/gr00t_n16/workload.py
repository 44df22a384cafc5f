"""The ``gr00t_n16`` workload: binds the replica, its batch, its loss and its data path."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from autotune.config import TrainConfig
from autotune.config.stock import stock_config
from autotune.workloads.base import Batch, Workload
from autotune.workloads.gr00t_n16 import batch as batch_mod
from autotune.workloads.gr00t_n16.presets import PRESETS, get_preset

if TYPE_CHECKING:
    from autotune.config import DataConfig

REGION_NAMES = ("vision", "connector", "llm_frozen", "llm_trainable", "vlln", "dit", "projectors")


class Gr00tN16(Workload):
    """GR00T N1.6: SigLIP2 vision, Qwen3 LLM (top 4 layers trained), alternating DiT action head."""

    name = "gr00t_n16"
    presets = tuple(PRESETS)
    default_preset = "full"
    cpu_preset = "tiny"
    data_fields = ("dataset", "episodes", "video_backend")

    def build_model(self, preset: str, device: str | torch.device = "cpu") -> nn.Module:
        from autotune.workloads.gr00t_n16.model import Gr00tN16Model

        return Gr00tN16Model(get_preset(preset), device=device)

    def regions(self, model: nn.Module) -> dict[str, list[nn.Module]]:
        return model.region_map()

    def blocks(self, model: nn.Module) -> dict[str, list[nn.Module]]:
        """A block stack (vision tower, LLM halves, DiT) by its blocks; any other module whole."""
        from autotune.workloads.gr00t_n16.layers import BlockStack

        return {name: [b for m in modules for b in (m.blocks if isinstance(m, BlockStack) else [m])]
                for name, modules in self.regions(model).items()}

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

    def synthetic_batch(self, preset, batch_size, device, generator=None) -> Batch:
        return batch_mod.synthetic_batch(get_preset(preset), batch_size, device, generator)

    def make_loader(
        self, preset: str, data: DataConfig, batch_size: int, *, seed: int, rank: int = 0, world_size: int = 1
    ) -> Iterable[Batch]:
        if data.source == "synthetic":
            return super().make_loader(preset, data, batch_size, seed=seed, rank=rank, world_size=world_size)
        from autotune.workloads.gr00t_n16.data import build_loader

        return build_loader(get_preset(preset), data, batch_size, seed=seed, rank=rank, world_size=world_size)

    def tokens_per_sample(self, preset: str) -> int:
        return get_preset(preset).seq_len

    @functools.cache  # noqa: B019  (the workload is a process-wide singleton)
    def flops_per_sample(self, preset: str) -> float:
        from autotune.workloads.gr00t_n16.flops import count_flops

        return count_flops(self, preset)["total"]

    def describe(self, preset: str) -> dict[str, Any]:
        from autotune.workloads.gr00t_n16.flops import describe

        return describe(self, preset)
