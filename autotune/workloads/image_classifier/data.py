"""Image files decoded with PIL in the loader's workers.

A dataset folder holds one sub-folder of PNG and JPEG files a class (``class_007/00012.jpg``), the
layout of torchvision's ``ImageFolder``. With ``data.dataset`` null the workload makes one once in
the cache: each class its own colour and stripe orientation, with noise, so a model can learn them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from autotune.data.cache import cache_folder
from autotune.errors import DataError, WorkloadError
from autotune.workloads.hf_common import make_once
from autotune.workloads.image_classifier.presets import ViTPreset

SUFFIXES = (".png", ".jpg", ".jpeg")
FOLDER_SEED = 0


def _pil():
    try:
        from PIL import Image
    except ImportError:
        raise WorkloadError(
            "this workload decodes images with Pillow: pip install 'autotune[hf]'"
        ) from None
    return Image


def class_image(cls: int, classes: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """An RGB image of class ``cls``: its colour, stripes at its angle, noise on top."""
    hue = np.array(
        [
            np.cos(2 * np.pi * cls / classes),
            np.sin(2 * np.pi * cls / classes),
            0.5 - cls / classes / 2,
        ]
    )
    y, x = np.mgrid[0:size, 0:size] / size
    angle = np.pi * cls / classes
    stripes = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * (x * np.cos(angle) + y * np.sin(angle)))
    img = (
        0.5
        + 0.35 * hue[None, None, :] * stripes[..., None]
        + 0.15 * rng.standard_normal((size, size, 3))
    )
    return (np.clip(img, 0, 1) * 255).astype(np.uint8)


def write_folder(folder: Path, p: ViTPreset, seed: int = FOLDER_SEED) -> None:
    Image = _pil()
    rng = np.random.default_rng(seed)
    for cls in range(p.classes):
        sub = folder / f"class_{cls:03d}"
        sub.mkdir()
        for i in range(p.per_class):  # PNG and JPEG, both as a real folder of photos may hold
            Image.fromarray(class_image(cls, p.classes, p.file_size, rng)).save(
                sub / f"{i:05d}{SUFFIXES[i % 2]}"
            )


def image_folder(p: ViTPreset, dataset: str | None) -> Path:
    if dataset:
        return Path(dataset)
    name = f"images-c{p.classes}-n{p.per_class}-s{p.file_size}-seed{FOLDER_SEED}"
    return make_once(cache_folder("datasets") / name, lambda d: write_folder(d, p))


class ImageFiles(torch.utils.data.Dataset):
    """``self[i]``: image ``i`` decoded, resized to ``size`` and scaled to [-1, 1] (``pixel_values``
    [3, size, size]), and its class (``labels``)."""

    def __init__(self, folder: Path, size: int, classes: int) -> None:
        subs = sorted(d for d in folder.iterdir() if d.is_dir()) if folder.is_dir() else []
        if not subs:
            raise DataError(
                f"{folder}: no class folders; an image dataset is a folder of one folder of images a class"
            )
        if len(subs) > classes:
            raise DataError(
                f"{folder}: {len(subs)} class folders, more than the model's {classes} classes"
            )
        self.files = [
            (f, label)
            for label, d in enumerate(subs)
            for f in sorted(d.iterdir())
            if f.suffix.lower() in SUFFIXES
        ]
        if not self.files:
            raise DataError(f"{folder}: its class folders hold no {'/'.join(SUFFIXES)} files")
        self.size = size

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        path, label = self.files[index]
        try:
            with _pil().open(path) as img:
                rgb = img.convert("RGB").resize((self.size, self.size), resample=2)  # bilinear
        except OSError as exc:
            raise DataError(f"{path}: cannot be decoded ({exc})") from None
        pixels = torch.from_numpy(np.asarray(rgb, dtype=np.float32)).permute(2, 0, 1) / 127.5 - 1.0
        return {"pixel_values": pixels, "labels": torch.tensor(label, dtype=torch.int64)}
