"""Sizes of the causal language model: Llama decoders from ~2 M parameters (CPU) to ~0.5 B (one GPU)."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import WorkloadError


@dataclass(frozen=True)
class LMPreset:
    name: str
    vocab_size: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    seq_len: int
    batch_size: int
    """Samples a step in the stock configuration."""
    windows: int
    """Token windows of the shard made on disk (``data.dataset`` null)."""


PRESETS = {
    "tiny": LMPreset(
        "tiny",
        vocab_size=4096,
        hidden=128,
        layers=4,
        heads=4,
        kv_heads=2,
        ffn=344,
        seq_len=64,
        batch_size=4,
        windows=256,
    ),
    "small": LMPreset(
        "small",
        vocab_size=32000,
        hidden=512,
        layers=8,
        heads=8,
        kv_heads=4,
        ffn=1376,
        seq_len=512,
        batch_size=16,
        windows=4096,
    ),
    # 24 x 17.2 M in the decoder layers + 2 x 41 M of untied embeddings: 0.49 B
    "0.5b": LMPreset(
        "0.5b",
        vocab_size=32000,
        hidden=1280,
        layers=24,
        heads=20,
        kv_heads=4,
        ffn=3456,
        seq_len=1024,
        batch_size=16,
        windows=8192,
    ),
}


def get_preset(name: str) -> LMPreset:
    if name not in PRESETS:
        raise WorkloadError(
            f"preset {name!r} of workload 'hf_causal_lm' is unknown; known presets: {list(PRESETS)}"
        )
    return PRESETS[name]
