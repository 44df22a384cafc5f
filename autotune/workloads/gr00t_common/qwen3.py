"""The Qwen3 decoder layer both GR00T backbones use (Qwen3-1.7B's in N1.6, Qwen3-VL's text model in
N1.7): GQA with q/k RMSNorm and RoPE, SwiGLU MLP. No biases."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autotune.workloads.gr00t_common.layers import FusedProjections, RMSNorm


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
    def __init__(self, p) -> None:
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
    def __init__(self, p) -> None:
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


def image_rows(
    is_image: torch.Tensor, image_embeds: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """[B, L, D]: at the k-th ``is_image`` position of a row, ``image_embeds[:, k]`` (elsewhere a
    neighbour's row, for the caller to mask out).

    A gather by running count, with no data-dependent shapes: no host sync, capturable in a graph
    (each row holds exactly N image positions for ``image_embeds`` [B, N, D], ``batch.layout_tokens``).
    """
    slot = (torch.cumsum(is_image, dim=1) - 1).clamp(min=0, max=image_embeds.shape[1] - 1)
    index = slot.unsqueeze(-1).expand(-1, -1, image_embeds.shape[-1])
    return torch.gather(image_embeds.to(dtype), 1, index)


def scatter_images(
    x: torch.Tensor, is_image: torch.Tensor, image_embeds: torch.Tensor
) -> torch.Tensor:
    """``x`` [B, L, D] with its ``is_image`` positions replaced by ``image_embeds`` [B, N, D], in order."""
    return torch.where(is_image.unsqueeze(-1), image_rows(is_image, image_embeds, x.dtype), x)
