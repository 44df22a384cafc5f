"""Sizes of the GR00T N1.6 replica. ``full`` is the spec's (../shared/spec/gr00t_n16.md)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from autotune.errors import WorkloadError
from autotune.workloads.gr00t_common.shape import (  # noqa: F401  the ids the replica's batch uses
    IMG_CONTEXT_ID,
    IMG_END_ID,
    IMG_START_ID,
    NUM_SPECIAL_TOKENS,
    PAD_ID,
    UNK_ID,
    Gr00tSizes,
)


@dataclass(frozen=True)
class Gr00tPreset(Gr00tSizes):
    """The LLM and action-head sizes are ``Gr00tSizes``' (its defaults are N1.6's)."""

    # Vision tower (SigLIP2-shaped).
    image_size: int = 252
    """Height of a view at the vision tower (and its width unless ``image_width``)."""
    patch_size: int = 14
    vision_hidden: int = 1152
    vision_mlp: int = 4304
    vision_layers: int = 27
    vision_heads: int = 16
    vision_pos_grid: int = 16
    unshuffle: int = 2
    image_width: int | None = None
    """Width of a view; ``None``: square. A dataset's frames set it (``fit.py``)."""
    llm_trainable_layers: int = 4

    @property
    def image_shape(self) -> tuple[int, int]:
        """(height, width) of a view at the vision tower."""
        return self.image_size, self.image_width or self.image_size

    @property
    def patch_grid(self) -> tuple[int, int]:
        """Patches down and across a view."""
        h, w = self.image_shape
        return h // self.patch_size, w // self.patch_size

    @property
    def image_tokens_per_view(self) -> int:
        gh, gw = self.patch_grid
        return (gh // self.unshuffle) * (gw // self.unshuffle)

    def __post_init__(self) -> None:
        side = self.patch_size * self.unshuffle
        if any(x % side for x in self.image_shape):
            raise WorkloadError(
                f"preset {self.name}: image {self.image_shape} is not a multiple of {side} px on each side"
            )
        super().__post_init__()


FULL = Gr00tPreset(name="full")

# About a tenth of full's FLOPs per sample, same structure: for quick GPU trials.
MEDIUM = replace(
    FULL,
    name="medium",
    vision_hidden=512,
    vision_mlp=2048,
    vision_layers=8,
    vision_heads=8,
    llm_hidden=1024,
    llm_ffn=3072,
    llm_layers=8,
    llm_heads=8,
    llm_kv_heads=4,
    vocab_size=32_768,
    dit_layers=16,
    dit_heads=16,
    dit_ffn=3072,
    dit_out=512,
    state_hidden=512,
    decoder_hidden=512,
)

# A few million parameters: a CPU step of 2 samples well under a second on 2 cores.
TINY = replace(
    FULL,
    name="tiny",
    image_size=56,
    vision_hidden=64,
    vision_mlp=128,
    vision_layers=2,
    vision_heads=2,
    vision_pos_grid=4,
    llm_hidden=64,
    llm_ffn=128,
    llm_layers=4,
    llm_trainable_layers=2,
    llm_heads=4,
    llm_kv_heads=2,
    llm_head_dim=16,
    vocab_size=1024,
    seq_len=40,
    dit_layers=4,
    dit_heads=4,
    dit_head_dim=16,
    dit_ffn=128,
    dit_out=64,
    timestep_channels=32,
    max_positions=64,
    state_hidden=64,
    decoder_hidden=64,
)

PRESETS: dict[str, Gr00tPreset] = {p.name: p for p in (FULL, MEDIUM, TINY)}


def get_preset(name: str) -> Gr00tPreset:
    if name not in PRESETS:
        raise WorkloadError(
            f"preset {name!r} of workload 'gr00t_n16' is unknown; known presets: {list(PRESETS)}"
        )
    return PRESETS[name]
