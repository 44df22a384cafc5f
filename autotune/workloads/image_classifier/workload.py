"""``image_classifier``: a Hugging Face ``transformers`` ViT classifying image files decoded with PIL.

A template for a vision model whose loader does real work: the workers decode and resize the files
(so the loader knobs matter), the model is a ViT built from a config.

    python -m autotune run --workload image_classifier               # tiny on CPU, base on a GPU
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from autotune.config import DataConfig, OptimizerConfig, TrainConfig
from autotune.workloads.base import Batch, Workload
from autotune.workloads.hf_common import (
    build,
    linear_params,
    require_transformers,
    transformer_flops,
)
from autotune.workloads.image_classifier.presets import PRESETS, ViTPreset, get_preset


def vit_config(p: ViTPreset):
    transformers = require_transformers()
    return transformers.ViTConfig(
        image_size=p.image_size, patch_size=p.patch, hidden_size=p.hidden, num_hidden_layers=p.layers,
        num_attention_heads=p.heads, intermediate_size=p.mlp, num_labels=p.classes, attn_implementation="sdpa",
    )  # fmt: skip


class ImageClassifier(Workload):
    """``transformers.ViTForImageClassification`` from a config, on a folder of PNG and JPEG files."""

    name = "image_classifier"
    presets = tuple(PRESETS)
    default_preset = "base"
    cpu_preset = "tiny"
    data_fields = ("dataset",)

    def build_model(self, preset: str, device: str | torch.device = "cpu") -> nn.Module:
        return build(
            require_transformers().ViTForImageClassification, vit_config(get_preset(preset)), device
        )

    def regions(self, model: nn.Module) -> dict[str, list[nn.Module]]:
        vit = model.vit
        layers = vit.layers if hasattr(vit, "layers") else vit.encoder.layer  # transformers 5 / 4
        return {
            "embeddings": [vit.embeddings],
            "encoder": list(layers),
            "head": [vit.layernorm, model.classifier],
        }

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return model(pixel_values=batch["pixel_values"], labels=batch["labels"]).loss

    def synthetic_batch(self, preset, batch_size, device, generator=None) -> Batch:
        p = get_preset(preset)
        pixels = torch.rand(batch_size, 3, p.image_size, p.image_size, generator=generator) * 2 - 1
        labels = torch.randint(0, p.classes, (batch_size,), generator=generator)
        return {"pixel_values": pixels.to(device), "labels": labels.to(device)}

    def data_sources(self) -> tuple[str, ...]:
        return ("image_files", "synthetic")

    def dataset(
        self, preset: str, data: DataConfig, *, seed: int, rank: int = 0, world_size: int = 1
    ):
        from autotune.workloads.image_classifier.data import ImageFiles, image_folder

        p = get_preset(preset)
        return ImageFiles(image_folder(p, data.dataset), p.image_size, p.classes)

    def optimizer_config(self, preset: str) -> OptimizerConfig:
        """A ViT recipe: AdamW at 1e-3, decay 0.05, 5 % warm-up, cosine, clip 1."""
        return OptimizerConfig(lr=1e-3, weight_decay=0.05, warmup_ratio=0.05, grad_clip=1.0)

    def stock_config(self, preset: str) -> TrainConfig:
        """Plain PyTorch (fp32, the images decoded in the training process) at the preset's batch."""
        cfg = super().stock_config(preset)
        cfg.batch_size = get_preset(preset).batch_size
        return cfg

    @functools.cache  # noqa: B019  (the workload is a process-wide singleton)
    def flops_per_sample(self, preset: str) -> float:
        p = get_preset(preset)
        return transformer_flops(
            linear_params(self.build_model(preset, "meta")), p.layers, p.hidden, p.tokens
        )
