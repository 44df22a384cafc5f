"""Sizes of the image classifier: ViTs from a CPU toy to ViT-B/16 at 224 px."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import WorkloadError


@dataclass(frozen=True)
class ViTPreset:
    name: str
    image_size: int
    patch: int
    hidden: int
    layers: int
    heads: int
    mlp: int
    classes: int
    batch_size: int
    """Samples a step in the stock configuration."""
    per_class: int
    """Images of each class in the folder made on disk (``data.dataset`` null)."""
    file_size: int
    """Side of the images on disk (the loader resizes them to ``image_size``)."""

    @property
    def tokens(self) -> int:
        return (self.image_size // self.patch) ** 2 + 1  # the patches and the class token


PRESETS = {
    "tiny": ViTPreset(
        "tiny",
        image_size=32,
        patch=8,
        hidden=64,
        layers=2,
        heads=4,
        mlp=128,
        classes=10,
        batch_size=8,
        per_class=16,
        file_size=40,
    ),
    "small": ViTPreset(
        "small",
        image_size=224,
        patch=16,
        hidden=384,
        layers=12,
        heads=6,
        mlp=1536,
        classes=100,
        batch_size=64,
        per_class=8,
        file_size=256,
    ),
    "base": ViTPreset(
        "base",
        image_size=224,
        patch=16,
        hidden=768,
        layers=12,
        heads=12,
        mlp=3072,
        classes=100,
        batch_size=64,
        per_class=8,
        file_size=256,
    ),
}


def get_preset(name: str) -> ViTPreset:
    if name not in PRESETS:
        raise WorkloadError(
            f"preset {name!r} of workload 'image_classifier' is unknown; known presets: {list(PRESETS)}"
        )
    return PRESETS[name]
