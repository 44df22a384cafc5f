"""A GR00T N1.7 preset fitted to a dataset: the dataset's views decide the sequence.

Upstream N1.7 resizes every frame to 256 x 256 whatever its aspect (``image_target_size``), takes a
random 230 x 230 crop (``image_crop_size``; 230/256 of each side) and resizes it to 256 x 256 again,
so every view is 64 tokens (16 x 16 patches of 16 px, merged 2 x 2) and the frame size changes
nothing. The fitted preset keeps its room for text; its sequence is the text room plus every view's
``<img>`` + tokens + ``</img>``: one fixed length per dataset, so shapes stay static for graph
capture. State and action stay padded to the preset's 132 dims (with the action mask), actions to
its horizon of 40.
"""

from __future__ import annotations

from dataclasses import replace

from autotune.data.meta import DatasetMeta
from autotune.workloads.gr00t_common.fit import check_vectors
from autotune.workloads.gr00t_n17.presets import Gr00tN17Preset


def fit_preset(preset: Gr00tN17Preset, meta: DatasetMeta) -> Gr00tN17Preset:
    """``preset`` with the views and sequence length of ``meta``'s dataset."""
    check_vectors(preset, meta)
    views = len(meta.video_keys)
    seq_len = preset.max_text_tokens + views * (preset.image_tokens_per_view + 2)
    return replace(preset, views=views, seq_len=seq_len)


def describe_fit(base: Gr00tN17Preset, fitted: Gr00tN17Preset, root) -> str:
    """One line: what the dataset changed in the preset's inputs (empty when nothing)."""
    if (base.views, base.seq_len) == (fitted.views, fitted.seq_len):
        return ""
    return (
        f"preset {base.name} fitted to {root}: {fitted.views} views ({fitted.image_tokens_per_view} "
        f"tokens each), sequence {base.seq_len} -> {fitted.seq_len} tokens"
    )
