"""Sizes of the GR00T N1.6 replica. ``full`` is the spec's (../shared/spec/gr00t_n16.md)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from autotune.errors import WorkloadError

# Special token ids of the model; the dataset's words come after them (text.py).
PAD_ID, IMG_START_ID, IMG_END_ID, IMG_CONTEXT_ID, UNK_ID = 0, 1, 2, 3, 4
NUM_SPECIAL_TOKENS = 5


@dataclass(frozen=True)
class Gr00tPreset:
    name: str
    # Vision tower (SigLIP2-shaped).
    image_size: int = 252
    """Height of a view at the vision tower (and its width unless ``image_width``)."""
    patch_size: int = 14
    vision_hidden: int = 1152
    vision_mlp: int = 4304
    vision_layers: int = 27
    vision_heads: int = 16
    vision_pos_grid: int = 16
    views: int = 2
    unshuffle: int = 2
    image_width: int | None = None
    """Width of a view; ``None``: square. A dataset's frames set it (``fit.py``)."""
    # LLM (Qwen3-shaped, truncated).
    llm_hidden: int = 2048
    llm_ffn: int = 6144
    llm_layers: int = 16
    llm_trainable_layers: int = 4
    llm_heads: int = 16
    llm_kv_heads: int = 8
    llm_head_dim: int = 128
    vocab_size: int = 151_680
    rope_theta: float = 1e6
    seq_len: int = 220
    # Action head (alternating DiT).
    dit_layers: int = 32
    dit_heads: int = 32
    dit_head_dim: int = 48
    dit_ffn: int = 6144
    dit_out: int = 1024
    timestep_channels: int = 256
    max_positions: int = 1024
    dropout: float = 0.2
    # Embodiment-specific projectors.
    num_embodiments: int = 32
    state_dim: int = 128
    action_dim: int = 128
    action_horizon: int = 50
    state_hidden: int = 1024
    decoder_hidden: int = 1024

    @property
    def dit_width(self) -> int:
        return self.dit_heads * self.dit_head_dim

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

    @property
    def max_text_tokens(self) -> int:
        """Room left for text once every view's ``<img>`` + context tokens + ``</img>`` is placed."""
        return self.seq_len - self.views * (self.image_tokens_per_view + 2)

    def __post_init__(self) -> None:
        side = self.patch_size * self.unshuffle
        if any(x % side for x in self.image_shape):
            raise WorkloadError(
                f"preset {self.name}: image {self.image_shape} is not a multiple of {side} px on each side"
            )
        if self.max_text_tokens < 4:
            raise WorkloadError(
                f"preset {self.name}: seq_len {self.seq_len} leaves no room for text"
            )


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
