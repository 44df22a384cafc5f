"""The alternating vision-language DiT of the action head (flow matching).

Blocks alternate: odd layers self-attend over the query tokens (1 state + the horizon's actions); even
layers cross-attend to the VL tokens, layers 0, 4, 8, ... to the text tokens only and layers 2,
6, 10, ... to the image tokens only (boolean masks). Every block is AdaLN(timestep) ->
attention -> dropout + residual; LayerNorm (no affine) -> FFN (gelu-tanh) -> residual, with
dropout at four places.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autotune.workloads.gr00t_common.layers import BlockStack, sinusoidal
from autotune.workloads.gr00t_common.shape import Gr00tSizes


def few_rows(linear: nn.Linear) -> nn.Linear:
    """Mark a layer applied to the timestep embedding, one row per sample: too few rows for an fp8
    GEMM to pay for scaling its weight (``precision: fp8`` leaves it in bf16)."""
    linear.few_rows = True
    return linear


class AdaLayerNorm(nn.Module):
    """LayerNorm without affine, scaled and shifted by a linear map of SiLU(temb)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = few_rows(nn.Linear(dim, 2 * dim))
        self.norm = nn.LayerNorm(dim, eps=1e-5, elementwise_affine=False)

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        scale, shift = self.linear(F.silu(temb)).unsqueeze(1).chunk(2, dim=-1)
        return self.norm(x) * (1 + scale) + shift


class DiTAttention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_dim: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.to_q, self.to_k, self.to_v = (
            nn.Linear(dim, dim),
            nn.Linear(kv_dim, dim),
            nn.Linear(kv_dim, dim),
        )
        self.to_out = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, context: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        B, N, D = x.shape
        q = self.to_q(x).view(B, N, self.heads, -1).transpose(1, 2)
        k = self.to_k(context).view(B, context.shape[1], self.heads, -1).transpose(1, 2)
        v = self.to_v(context).view(B, context.shape[1], self.heads, -1).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.dropout(self.to_out(out.transpose(1, 2).reshape(B, N, D)))


class DiTBlock(nn.Module):
    """``kind``: ``self``, ``text`` (cross-attention to text tokens) or ``image``."""

    def __init__(self, p: Gr00tSizes, kind: str) -> None:
        super().__init__()
        dim = p.dit_width
        self.kind = kind
        self.norm1 = AdaLayerNorm(dim)
        self.attn1 = DiTAttention(
            dim, p.dit_heads, dim if kind == "self" else p.llm_hidden, p.dropout
        )
        self.dropout1 = nn.Dropout(p.dropout)
        self.norm3 = nn.LayerNorm(dim, eps=1e-5, elementwise_affine=False)
        self.ff_in, self.ff_out = nn.Linear(dim, p.dit_ffn), nn.Linear(p.dit_ffn, dim)
        self.ff_dropout, self.ff_final_dropout = nn.Dropout(p.dropout), nn.Dropout(p.dropout)

    def forward(self, x, temb, text, image) -> torch.Tensor:
        """``text`` and ``image``: (context [B, C, 2048], mask [B, 1, 1, C]) of the layers that attend
        to the text tokens and of those that attend to the image tokens."""
        h = self.norm1(x, temb)
        if self.kind == "self":
            h = self.attn1(h, h, None)
        else:
            h = self.attn1(h, *(text if self.kind == "text" else image))
        x = x + self.dropout1(h)
        h = self.ff_dropout(F.gelu(self.ff_in(self.norm3(x)), approximate="tanh"))
        return x + self.ff_final_dropout(self.ff_out(h))


def attended(
    vl: torch.Tensor, keep: torch.Tensor, capacity: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``keep`` tokens of each sample, in order, as a context of ``capacity`` tokens and its mask.

    ``vl`` [B, L, D], ``keep`` [B, L] bool with at most ``capacity`` True per row (the caller's
    guarantee: the batch layout bounds it). The kept tokens come first by a stable sort, so each
    sample's keys are its attended tokens in their order, then masked filler up to ``capacity``:
    the shape is static (a captured graph can replay it) and no host sync counts the tokens.
    """
    order = torch.argsort((~keep).to(torch.uint8), dim=1, stable=True)[:, :capacity]
    context = torch.gather(vl, 1, order.unsqueeze(-1).expand(-1, -1, vl.shape[-1]))
    return context, torch.gather(keep, 1, order)[:, None, None, :]


def block_kind(i: int) -> str:
    if i % 2 == 1:
        return "self"
    return "text" if i % 4 == 0 else "image"


class TimestepEncoder(nn.Module):
    """t_disc -> sinusoidal(256) -> Linear -> SiLU -> Linear."""

    def __init__(self, p: Gr00tSizes) -> None:
        super().__init__()
        self.channels = p.timestep_channels
        self.linear_1 = few_rows(nn.Linear(p.timestep_channels, p.dit_width))
        self.linear_2 = few_rows(nn.Linear(p.dit_width, p.dit_width))

    def forward(self, t_disc: torch.Tensor) -> torch.Tensor:
        emb = sinusoidal(t_disc, self.channels).to(self.linear_1.weight.dtype)
        return self.linear_2(F.silu(self.linear_1(emb)))


class DiT(BlockStack):
    """``forward(tokens [B, 1 + horizon, W], text, image, t_disc [B]) -> [B, 1 + horizon, out]``.

    ``text`` and ``image`` are (context, mask) pairs: the VL tokens the text (image) layers attend
    over [B, C, 2048] and their boolean mask [B, 1, 1, C] (True = attend); upstream passes every VL
    token to both, with masks that pick the text or the image tokens.
    """

    def __init__(self, p: Gr00tSizes) -> None:
        super().__init__([DiTBlock(p, block_kind(i)) for i in range(p.dit_layers)])
        self.timestep_encoder = TimestepEncoder(p)
        self.norm_out = nn.LayerNorm(p.dit_width, eps=1e-6, elementwise_affine=False)
        self.proj_out_1 = few_rows(nn.Linear(p.dit_width, 2 * p.dit_width))
        self.proj_out_2 = nn.Linear(p.dit_width, p.dit_out)

    def forward(self, x, text, image, t_disc) -> torch.Tensor:
        temb = self.timestep_encoder(t_disc)
        x = self.run(x, temb, text, image)
        shift, scale = self.proj_out_1(F.silu(temb)).unsqueeze(1).chunk(2, dim=-1)
        return self.proj_out_2(self.norm_out(x) * (1 + scale) + shift)
