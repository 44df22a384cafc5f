"""Sizes of the GR00T N1.7 replica. ``full`` is ``nvidia/GR00T-N1.7-3B`` (../shared/spec/gr00t_n17.md).

Sources: the backbone is Cosmos-Reason2-2B, a Qwen3-VL-2B (its ``config.json`` as lerobot's
``_cosmos_reason2_qwen3_vl_config`` holds it: vision depth 24, hidden 1024, MLP 4096, 16 heads,
patch 16, temporal patch 2, 2x2 merge, 2304 learned positions, deepstack layers 5/11/17; text hidden
2048, FFN 6144, 16 heads / 8 KV of 128, vocab 151,936 tied, rope theta 5e6, M-RoPE sections
24/20/20). The action head and the stock configuration follow Isaac-GR00T's
``gr00t/configs/model/gr00t_n1d7.py`` except where the released checkpoint differs; there the
checkpoint's value (lerobot's ``GR00T_N1_7_DEFAULTS``, which mirrors the public checkpoint's config):
``select_layer`` 16 (code default 12), DiT ``num_layers`` 32 (code default 16),
``vl_self_attention_cfg`` 4 layers of 32 heads x 64 with dropout 0.2 (the code has none by default)
and ``state_dropout_prob`` 0.2 (code default 0.8).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autotune.errors import WorkloadError
from autotune.workloads.gr00t_common.shape import Gr00tSizes


@dataclass(frozen=True)
class Gr00tN17Preset(Gr00tSizes):
    """``Gr00tSizes`` with N1.7's text model, action dims and horizon, and its vision tower and adapter."""

    vocab_size: int = 151_936
    rope_theta: float = 5e6
    state_dim: int = 132
    action_dim: int = 132
    action_horizon: int = 40
    # Vision tower (Qwen3-VL ViT).
    image_size: int = 256
    """Side of a view at the vision tower: upstream resizes every frame to 256 x 256."""
    crop_size: int = 230
    """Side of the random crop taken from the resized frame (``image_crop_size``)."""
    patch_size: int = 16
    temporal_patch: int = 2
    """Frames per patch: an image is its own frame repeated (the Conv3d patch embedding's depth)."""
    merge: int = 2
    vision_hidden: int = 1024
    vision_mlp: int = 4096
    vision_layers: int = 24
    vision_heads: int = 16
    vision_pos_grid: int = 48
    """Side of the learned position grid (``num_position_embeddings`` 2304 = 48 x 48)."""
    deepstack_layers: tuple[int, ...] = (5, 11, 17)
    # Text model: M-RoPE.
    mrope_sections: tuple[int, int, int] = (24, 20, 20)
    # VL self-attention adapter (vl_self_attention_cfg of the released checkpoint).
    adapter_layers: int = 4
    adapter_heads: int = 32
    adapter_head_dim: int = 64
    state_dropout: float = 0.2

    @property
    def adapter_width(self) -> int:
        return self.adapter_heads * self.adapter_head_dim

    @property
    def image_shape(self) -> tuple[int, int]:
        return self.image_size, self.image_size

    @property
    def patch_grid(self) -> tuple[int, int]:
        side = self.image_size // self.patch_size
        return side, side

    @property
    def image_tokens_per_view(self) -> int:
        return (self.image_size // (self.patch_size * self.merge)) ** 2

    def __post_init__(self) -> None:
        side = self.patch_size * self.merge
        if self.image_size % side:
            raise WorkloadError(
                f"preset {self.name}: image {self.image_size} px is not a multiple of {side}"
            )
        if not 0 < self.crop_size <= self.image_size:
            raise WorkloadError(
                f"preset {self.name}: crop {self.crop_size} px is not in (0, {self.image_size}]"
            )
        if any(not 0 <= i < self.vision_layers for i in self.deepstack_layers):
            raise WorkloadError(f"preset {self.name}: deepstack layers {self.deepstack_layers} are not all "
                                f"in [0, {self.vision_layers})")  # fmt: skip
        if len(self.deepstack_layers) > self.llm_layers:
            raise WorkloadError(f"preset {self.name}: {len(self.deepstack_layers)} deepstack features need "
                                f"as many LLM layers; it has {self.llm_layers}")  # fmt: skip
        if 2 * sum(self.mrope_sections) != self.llm_head_dim:  # a section entry per frequency
            raise WorkloadError(f"preset {self.name}: M-RoPE sections {self.mrope_sections} do not add up "
                                f"to half the head dim {self.llm_head_dim}")  # fmt: skip
        if self.adapter_width != self.llm_hidden:
            raise WorkloadError(f"preset {self.name}: the adapter's width {self.adapter_width} is not the "
                                f"backbone's {self.llm_hidden}")  # fmt: skip
        super().__post_init__()


FULL = Gr00tN17Preset(name="full")

# About a tenth of full's FLOPs per sample, same structure: for quick GPU trials.
MEDIUM = replace(
    FULL, name="medium", vision_hidden=512, vision_mlp=2048, vision_layers=8, vision_heads=8,
    deepstack_layers=(1, 3, 5), llm_hidden=1024, llm_ffn=3072, llm_layers=8, llm_heads=8,
    llm_kv_heads=4, vocab_size=32_768, adapter_layers=2, adapter_heads=16, dit_layers=16,
    dit_heads=16, dit_ffn=3072, dit_out=512, state_hidden=512, decoder_hidden=512,
)  # fmt: skip

# A few million parameters: a CPU step of 2 samples well under a second on 2 cores.
TINY = replace(
    FULL, name="tiny", image_size=64, crop_size=58, vision_hidden=64, vision_mlp=128,
    vision_layers=4, vision_heads=2, vision_pos_grid=6, deepstack_layers=(0, 2), llm_hidden=64,
    llm_ffn=128, llm_layers=3, llm_heads=4, llm_kv_heads=2, llm_head_dim=16, mrope_sections=(4, 2, 2),
    vocab_size=1024, seq_len=48, adapter_layers=1, adapter_heads=2, adapter_head_dim=32,
    dit_layers=4, dit_heads=4, dit_head_dim=16, dit_ffn=128, dit_out=64, timestep_channels=32,
    max_positions=64, state_hidden=64, decoder_hidden=64,
)  # fmt: skip

PRESETS: dict[str, Gr00tN17Preset] = {p.name: p for p in (FULL, MEDIUM, TINY)}


def get_preset(name: str) -> Gr00tN17Preset:
    if name not in PRESETS:
        raise WorkloadError(
            f"preset {name!r} of workload 'gr00t_n17' is unknown; known presets: {list(PRESETS)}"
        )
    return PRESETS[name]
