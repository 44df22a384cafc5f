"""Qwen3-shaped LLM truncated to 16 layers: GQA, q/k RMSNorm, RoPE, tied embeddings and LM head.

Split into the two regions the knobs address: ``LLMFrozen`` (token embedding, image-token
scatter, lower layers) and ``LLMTrainable`` (top layers, final norm, LM-head logits).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autotune.workloads.gr00t_common.layers import BlockStack, RMSNorm
from autotune.workloads.gr00t_common.qwen3 import Qwen3Layer, rope_tables, scatter_images
from autotune.workloads.gr00t_n16.presets import IMG_CONTEXT_ID, Gr00tPreset


class LLMFrozen(BlockStack):
    """Token embedding, image features scattered into the ``<image>`` slots, the lower layers.

    ``forward(input_ids [B, L], image_embeds [B, V*N, D]) -> hidden [B, L, D]``. The scatter is a
    gather by running count, with no data-dependent shapes: no host sync, capturable in a graph.
    """

    def __init__(self, p: Gr00tPreset) -> None:
        super().__init__([Qwen3Layer(p) for _ in range(p.llm_layers - p.llm_trainable_layers)])
        self.embed_tokens = nn.Embedding(p.vocab_size, p.llm_hidden)
        cos, sin = rope_tables(p.seq_len, p.llm_head_dim, p.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, input_ids: torch.Tensor, image_embeds: torch.Tensor) -> torch.Tensor:
        x = scatter_images(self.embed_tokens(input_ids), input_ids == IMG_CONTEXT_ID, image_embeds)
        return self.run(x, self.rope_cos, self.rope_sin)


class LLMTrainable(BlockStack):
    """The top layers (trained), the final RMSNorm and the LM-head logits of the tied embedding.

    ``forward(hidden) -> (final hidden [B, L, D], logits [B, L, vocab] or None)``. Upstream computes
    the logits and discards them; they cost ~137 GFLOP per sample, so the replica computes them too.
    They never reach the loss, so they are computed from a detached input: the same work, no
    backward through the LM head (exactly as upstream, where autograd never reaches them).
    ``compute_logits = False`` (knob ``model.skip_dead_work``) skips them and returns None.
    """

    def __init__(self, p: Gr00tPreset, tied: nn.Embedding) -> None:
        super().__init__([Qwen3Layer(p) for _ in range(p.llm_trainable_layers)])
        self.norm = RMSNorm(p.llm_hidden)
        self._tied = [tied]  # a list: the embedding is owned (and counted) by llm_frozen
        self.compute_logits = True
        cos, sin = rope_tables(p.seq_len, p.llm_head_dim, p.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        h = self.norm(self.run(hidden, self.rope_cos, self.rope_sin))
        if not self.compute_logits:
            return h, None
        weight = self._tied[0].weight
        if weight.dtype != h.dtype and (
            h.device.type == "meta" or not torch.is_autocast_enabled(h.device.type)
        ):
            # an fp32 region: the tied embedding is llm_frozen's, stored in frozen_dtype (bf16 by default).
            # On two H200s this map (llm_trainable fp32, llm_frozen bf16) failed its trial here.
            weight = weight.to(h.dtype)
        logits = F.linear(h.detach(), weight)
        return h, logits
