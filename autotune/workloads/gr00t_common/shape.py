"""What the GR00T replicas (N1.6, N1.7) share in their sizes: the token ids of the batch layout, the
Qwen3 text model's sizes and the action head's. Each model's preset dataclass extends
:class:`Gr00tSizes` with its vision tower (and overrides the defaults where it differs)."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import WorkloadError

# Special token ids of the replicas; the dataset's words come after them (text.py).
PAD_ID, IMG_START_ID, IMG_END_ID, IMG_CONTEXT_ID, UNK_ID = 0, 1, 2, 3, 4
NUM_SPECIAL_TOKENS = 5


@dataclass(frozen=True)
class Gr00tSizes:
    """Sizes of a GR00T replica outside its vision tower. Defaults: GR00T N1.6's ``full``."""

    name: str
    views: int = 2
    seq_len: int = 220
    """Tokens of a sample: text, then per view ``<img>`` + its image tokens + ``</img>``, padded."""
    # LLM (Qwen3-shaped, truncated).
    llm_hidden: int = 2048
    """Also the width of the VL tokens the DiT's cross-attention reads (``backbone_embedding_dim``)."""
    llm_ffn: int = 6144
    llm_layers: int = 16
    llm_heads: int = 16
    llm_kv_heads: int = 8
    llm_head_dim: int = 128
    vocab_size: int = 151_680
    rope_theta: float = 1e6
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
    def image_tokens_per_view(self) -> int:
        raise NotImplementedError  # the vision tower's: each model's preset

    @property
    def image_shape(self) -> tuple[int, int]:
        raise NotImplementedError

    @property
    def max_text_tokens(self) -> int:
        """Room left for text once every view's ``<img>`` + context tokens + ``</img>`` is placed."""
        return self.seq_len - self.views * (self.image_tokens_per_view + 2)

    def __post_init__(self) -> None:
        if self.max_text_tokens < 4:
            raise WorkloadError(
                f"preset {self.name}: seq_len {self.seq_len} leaves no room for text"
            )
