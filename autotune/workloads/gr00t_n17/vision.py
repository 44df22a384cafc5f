"""The Qwen3-VL vision tower of Cosmos-Reason2-2B: patch embedding, ViT, patch mergers (deepstack).

Per view: uint8 [3, H, W] -> normalised (mean 0.5, std 0.5) -> 16 x 16 patches, each repeated over
the two frames of a temporal patch (an image is a one-frame video) -> Linear(3*2*16*16 -> 1024) (the
Conv3d patch embedding with stride = kernel, as a GEMM) + the learned 48 x 48 position grid
interpolated bilinearly (corners aligned) to the patch grid -> 24 pre-LN blocks (2-D rotary
attention over the view's patches, GELU-tanh MLP). ``merger`` takes the last block's output,
``deepstack`` mergers the outputs of blocks 5, 11, 17: each groups 2 x 2 neighbouring patches into
one token of 2048 (LayerNorm before the grouping for ``merger``, after it for the deepstack ones).
Patches are kept row-major: attention is permutation-equivariant, and positions travel with the
patches, so the order upstream's processor gives them (merge window by merge window) changes nothing
but the grouping, which :func:`merge_windows` does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autotune.workloads.gr00t_common.layers import (
    BlockStack,
    epilogue_takes,
    gelu_tanh_in_epilogue,
)
from autotune.workloads.gr00t_common.qwen3 import apply_rope
from autotune.workloads.gr00t_n17.presets import Gr00tN17Preset


def vision_rope(
    grid: tuple[int, int], head_dim: int, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [h*w, head_dim] of the 2-D rotary embedding: a quarter of the frequencies per axis
    (rows, then columns), base 10000, repeated for the two halves ``apply_rope`` rotates."""
    quarter = head_dim // 4
    inv = 1.0 / (
        10000
        ** (torch.arange(0, 2 * quarter, 2, device=device, dtype=torch.float32) / (2 * quarter))
    )
    rows, cols = torch.meshgrid(torch.arange(grid[0], device=device), torch.arange(grid[1], device=device),
                                indexing="ij")  # fmt: skip
    freqs = torch.cat(
        [torch.outer(rows.flatten().float(), inv), torch.outer(cols.flatten().float(), inv)], -1
    )
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def merge_windows(x: torch.Tensor, grid: tuple[int, int], r: int) -> torch.Tensor:
    """[N, h*w, D] row-major patches -> [N, (h/r)*(w/r), r*r*D]: each r x r window's patches side by
    side, row-major within the window (the order Qwen3-VL's processor lays them out in)."""
    N, _, D = x.shape
    h, w = grid
    x = x.reshape(N, h // r, r, w // r, r, D).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(N, (h // r) * (w // r), r * r * D)


class VisionAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        N, P, D = x.shape
        q, k, v = self.qkv(x).view(N, P, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v)  # each view its own sequence, no mask
        return self.proj(out.transpose(1, 2).reshape(N, P, D))


class VisionBlock(nn.Module):
    """Pre-LN attention and GELU-tanh MLP. ``gelu_epilogue`` (knob ``model.gelu_epilogue``): where
    :func:`epilogue_takes` (a frozen tower on CUDA), ``linear_fc1``'s bias and GELU run in its GEMM's
    epilogue: no pass of their own over its output."""

    def __init__(self, dim: int, mlp: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.attn = VisionAttention(dim, heads)
        self.linear_fc1, self.linear_fc2 = nn.Linear(dim, mlp), nn.Linear(mlp, dim)
        self.gelu_epilogue = False

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cos, sin)
        h = self.norm2(x)
        if self.gelu_epilogue and epilogue_takes(self.linear_fc1, h):
            h = gelu_tanh_in_epilogue(self.linear_fc1, h)
        else:
            h = F.gelu(self.linear_fc1(h), approximate="tanh")
        return x + self.linear_fc2(h)


class PatchMerger(nn.Module):
    """LayerNorm -> 2 x 2 grouping (or the grouping first: ``postshuffle``) -> Linear -> GELU -> Linear."""

    def __init__(self, p: Gr00tN17Preset, *, postshuffle: bool) -> None:
        super().__init__()
        wide = p.vision_hidden * p.merge**2
        self.postshuffle, self.grid, self.r = postshuffle, p.patch_grid, p.merge
        self.norm = nn.LayerNorm(wide if postshuffle else p.vision_hidden, eps=1e-6)
        self.linear_fc1, self.linear_fc2 = nn.Linear(wide, wide), nn.Linear(wide, p.llm_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.postshuffle:
            x = self.norm(merge_windows(x, self.grid, self.r))
        else:
            x = merge_windows(self.norm(x), self.grid, self.r)
        return self.linear_fc2(F.gelu(self.linear_fc1(x)))


class VisionTower(BlockStack):
    """``forward(pixels uint8 [N, 3, H, W]) -> (patch features [N, P, D], deepstack features)``:
    the last block's output and, per deepstack layer, that block's output (see the module)."""

    def __init__(self, p: Gr00tN17Preset) -> None:
        super().__init__(
            [
                VisionBlock(p.vision_hidden, p.vision_mlp, p.vision_heads)
                for _ in range(p.vision_layers)
            ]
        )
        self.p = p
        self.patch_embed = nn.Linear(3 * p.temporal_patch * p.patch_size**2, p.vision_hidden)
        self.pos_embed = nn.Embedding(p.vision_pos_grid**2, p.vision_hidden)
        cos, sin = vision_rope(p.patch_grid, p.vision_hidden // p.vision_heads)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def patches(self, pixels: torch.Tensor) -> torch.Tensor:
        """[N, h*w, 3*T*s*s]: each patch as (channel, frame, row, column), the frame repeated."""
        x = pixels.to(self.patch_embed.weight.dtype) / 127.5 - 1.0
        N, C, _, _ = x.shape
        s, T = self.p.patch_size, self.p.temporal_patch
        x = x.unfold(2, s, s).unfold(3, s, s).permute(0, 2, 3, 1, 4, 5)  # N, h, w, C, s, s
        x = x.unsqueeze(4).expand(*x.shape[:4], T, s, s)
        return x.reshape(N, -1, C * T * s * s)

    def positions(self) -> torch.Tensor:
        """The learned grid interpolated to the patch grid: [h*w, D]."""
        g, D = self.p.vision_pos_grid, self.p.vision_hidden
        grid = self.pos_embed.weight.reshape(1, g, g, D).permute(0, 3, 1, 2).float()
        pos = F.interpolate(grid, size=self.p.patch_grid, mode="bilinear", align_corners=True)
        return pos.to(self.pos_embed.weight.dtype).permute(0, 2, 3, 1).reshape(-1, D)

    def forward(self, pixels: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        x = self.patch_embed(self.patches(pixels)) + self.positions()
        deep = []
        for i, block in enumerate(self.blocks):
            x = self.call(block, x, self.rope_cos, self.rope_sin)
            if i in self.p.deepstack_layers:
                deep.append(x)
        return x, deep


class Mergers(nn.Module):
    """The ``connector`` region: ``merger`` and the ``deepstack`` mergers.

    ``forward(last, deep) -> (image tokens [N, M, 2048], [deepstack tokens [N, M, 2048], ...])``.
    """

    def __init__(self, p: Gr00tN17Preset) -> None:
        super().__init__()
        self.merger = PatchMerger(p, postshuffle=False)
        self.deepstack = nn.ModuleList(PatchMerger(p, postshuffle=True) for _ in p.deepstack_layers)

    def forward(
        self, last: torch.Tensor, deep: list[torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        return self.merger(last), [m(x) for m, x in zip(self.deepstack, deep, strict=True)]
