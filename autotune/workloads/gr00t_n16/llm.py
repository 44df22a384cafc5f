"""Qwen3-shaped LLM truncated to 16 layers: GQA, q/k RMSNorm, RoPE, tied embeddings and LM head.

Split into the two regions the knobs address: ``LLMFrozen`` (token embedding, image-token
scatter, lower layers) and ``LLMTrainable`` (top layers, final norm, LM-head logits).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autotune.workloads.gr00t_n16.layers import BlockStack, FusedProjections, RMSNorm
from autotune.workloads.gr00t_n16.presets import IMG_CONTEXT_ID, Gr00tPreset


def rope_tables(
    seq_len: int, head_dim: int, theta: float, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    )
    freqs = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class Qwen3Attention(nn.Module):
    def __init__(self, p: Gr00tPreset) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = p.llm_heads, p.llm_kv_heads, p.llm_head_dim
        self.q_proj = nn.Linear(p.llm_hidden, p.llm_heads * p.llm_head_dim, bias=False)
        self.k_proj = nn.Linear(p.llm_hidden, p.llm_kv_heads * p.llm_head_dim, bias=False)
        self.v_proj = nn.Linear(p.llm_hidden, p.llm_kv_heads * p.llm_head_dim, bias=False)
        self.o_proj = nn.Linear(p.llm_heads * p.llm_head_dim, p.llm_hidden, bias=False)
        self.q_norm, self.k_norm = RMSNorm(p.llm_head_dim), RMSNorm(p.llm_head_dim)
        self.qkv = FusedProjections()

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        q, k, v = self.qkv(x, self.q_proj, self.k_proj, self.v_proj)
        q = self.q_norm(q.view(B, L, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(k.view(B, L, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = v.view(B, L, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.heads // self.kv_heads  # GQA: each KV head serves `rep` query heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        # Right padding + causal attention: real tokens never see the padding after them.
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(B, L, -1))


class Qwen3Layer(nn.Module):
    def __init__(self, p: Gr00tPreset) -> None:
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = (
            RMSNorm(p.llm_hidden),
            RMSNorm(p.llm_hidden),
        )
        self.self_attn = Qwen3Attention(p)
        self.gate_proj = nn.Linear(p.llm_hidden, p.llm_ffn, bias=False)
        self.up_proj = nn.Linear(p.llm_hidden, p.llm_ffn, bias=False)
        self.down_proj = nn.Linear(p.llm_ffn, p.llm_hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


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
        embeds = self.embed_tokens(input_ids)
        is_image = input_ids == IMG_CONTEXT_ID
        slot = (torch.cumsum(is_image, dim=1) - 1).clamp(min=0, max=image_embeds.shape[1] - 1)
        gathered = torch.gather(
            image_embeds.to(embeds.dtype), 1, slot.unsqueeze(-1).expand(-1, -1, embeds.shape[-1])
        )
        x = torch.where(is_image.unsqueeze(-1), gathered, embeds)
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
