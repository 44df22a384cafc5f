"""A preset fitted to a dataset: the dataset's views and frame size decide the model's inputs.

GR00T N1.6 runs its vision tower on every view the modality names, at the size upstream's
preprocessing gives: short edge resized to 256, a 0.95 crop, short edge 256 again, then both
sides rounded to multiples of 28 (14 px patches, 2x2 pixel-unshuffle) by the Eagle processor,
so a 256x256 frame becomes 252x252 (81 tokens) and a 480x640 one 252x336 (108 tokens). The
fitted preset keeps the preset's short side (252; 56 for ``tiny``) and its room for text, and
its sequence is the text room plus every view's ``<img>`` + tokens + ``</img>``: one fixed
length per dataset, so shapes stay static for graph capture. State and action stay padded to
the preset's 128 dims (with the action mask), actions to its horizon.

Views of different sizes all take the first view's shape (upstream keeps each view's own; one
shape keeps the batch a single tensor). What cannot be mapped raises one line naming the key.
"""

from __future__ import annotations

from dataclasses import replace

from autotune.data.augment import short_edge_for
from autotune.data.meta import DatasetMeta
from autotune.workloads.gr00t_common.fit import check_vectors
from autotune.workloads.gr00t_n16.presets import Gr00tPreset


def model_image_shape(preset: Gr00tPreset, height: int, width: int) -> tuple[int, int]:
    """(height, width) at the vision tower of ``height x width`` frames under ``preset``."""
    side = preset.patch_size * preset.unshuffle
    short = min(preset.image_shape)
    edge = short_edge_for(short)  # the short edge the augmentation resizes to (256; 64 for toys)
    long = max(short, side * round(edge * max(height, width) / min(height, width) / side))
    return (short, long) if width >= height else (long, short)


def fit_preset(preset: Gr00tPreset, meta: DatasetMeta) -> Gr00tPreset:
    """``preset`` with the views, image shape and sequence length of ``meta``'s dataset."""
    check_vectors(preset, meta)
    height, width, _ = meta.video_shapes[meta.video_keys[0]]
    h, w = model_image_shape(preset, height, width)
    side = preset.patch_size * preset.unshuffle
    views, tokens = len(meta.video_keys), (h // side) * (w // side)
    return replace(preset, views=views, image_size=h, image_width=None if w == h else w,
                   seq_len=preset.max_text_tokens + views * (tokens + 2))  # fmt: skip


def describe_fit(base: Gr00tPreset, fitted: Gr00tPreset, root) -> str:
    """One line: what the dataset changed in the preset's inputs (empty when nothing)."""
    if (base.views, base.image_shape, base.seq_len) == (
        fitted.views,
        fitted.image_shape,
        fitted.seq_len,
    ):
        return ""
    h, w = fitted.image_shape
    return (
        f"preset {base.name} fitted to {root}: {fitted.views} views of {w}x{h} px "
        f"({fitted.image_tokens_per_view} tokens each), sequence {base.seq_len} -> {fitted.seq_len} tokens"
    )
