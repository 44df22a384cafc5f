"""SigLIP2-shaped vision tower and the pixel-unshuffle MLP connector (``mlp1``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autotune.workloads.gr00t_common.layers import (
    BlockStack,
    FusedProjections,
    epilogue_takes,
    gelu_tanh_in_epilogue,
)
from autotune.workloads.gr00t_n16.presets import Gr00tPreset


class SiglipAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            nn.Linear(dim, dim) for _ in range(4)
        )
        self.qkv = FusedProjections()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        q, k, v = (
            t.view(B, N, self.heads, -1).transpose(1, 2)
            for t in self.qkv(x, self.q_proj, self.k_proj, self.v_proj)
        )
        out = F.scaled_dot_product_attention(q, k, v)  # global attention, no mask
        return self.out_proj(out.transpose(1, 2).reshape(B, N, D))


class SiglipLayer(nn.Module):
    """Pre-LN attention and GELU MLP. ``bias_in_activation`` (knob ``model.bias_in_activation``):
    ``fc1``'s bias is added in the GELU's kernel instead of the GEMM's. Compiled, the GEMM with a
    bias and a GELU after it starts from a copy of the bias over its whole output (a 10,368 x 4,304
    bf16 copy per layer for ``full``); without the bias the GEMM writes its output directly.
    ``gelu_epilogue`` (knob ``model.gelu_epilogue``): where :func:`epilogue_takes` (a frozen tower on
    CUDA), its bias and GELU run in the GEMM's epilogue: no pass of their own over its output."""

    def __init__(self, dim: int, mlp: int, heads: int) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.self_attn = SiglipAttention(dim, heads)
        self.layer_norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1, self.fc2 = nn.Linear(dim, mlp), nn.Linear(mlp, dim)
        self.bias_in_activation = False
        self.gelu_epilogue = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        h = self.layer_norm2(x)
        # a layer converted by precision (torchao's fp8 linear) keeps its own forward, which adds the
        # bias after its GEMM already
        plain = type(self.fc1) is nn.Linear
        if self.gelu_epilogue and epilogue_takes(self.fc1, h):
            h = gelu_tanh_in_epilogue(self.fc1, h)
        elif self.bias_in_activation and plain:
            h = F.gelu(F.linear(h, self.fc1.weight) + self.fc1.bias.to(h.dtype), approximate="tanh")
        else:
            h = F.gelu(self.fc1(h), approximate="tanh")
        return x + self.fc2(h)


class VisionTower(BlockStack):
    """Linear patch embedding 588->1152, a learned 16x16 position grid interpolated, 27 layers, post-LN.

    ``forward(pixels)`` takes uint8 frames [N, 3, H, W] and returns patch features [N, P, D].
    """

    def __init__(self, p: Gr00tPreset) -> None:
        super().__init__(
            [
                SiglipLayer(p.vision_hidden, p.vision_mlp, p.vision_heads)
                for _ in range(p.vision_layers)
            ]
        )
        self.patch, self.grid = p.patch_size, p.vision_pos_grid
        self.patch_embedding = nn.Linear(3 * p.patch_size**2, p.vision_hidden)
        self.position_embedding = nn.Parameter(torch.zeros(p.vision_pos_grid**2, p.vision_hidden))
        self.post_layernorm = nn.LayerNorm(p.vision_hidden, eps=1e-6)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        dtype = self.patch_embedding.weight.dtype
        x = pixels.to(dtype) / 127.5 - 1.0  # SigLIP normalisation: mean 0.5, std 0.5
        N, C, H, W = x.shape
        s = self.patch
        patches = x.unfold(2, s, s).unfold(3, s, s)  # N, C, h, w, s, s
        h, w = patches.shape[2], patches.shape[3]
        patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(N, h * w, C * s * s)
        pos = self.position_embedding.reshape(1, self.grid, self.grid, -1).permute(0, 3, 1, 2)
        pos = F.interpolate(pos.float(), size=(h, w), mode="bilinear", align_corners=False)
        pos = pos.to(dtype).permute(0, 2, 3, 1).reshape(1, h * w, -1)
        out = self.run(self.patch_embedding(patches) + pos)
        return self.post_layernorm(out)


class Connector(nn.Module):
    """``mlp1``: 2x2 pixel-unshuffle -> LayerNorm(4608) -> Linear -> GELU -> Linear."""

    def __init__(self, p: Gr00tPreset) -> None:
        super().__init__()
        self.r, self.grid = p.unshuffle, p.patch_grid
        dim = p.vision_hidden * p.unshuffle**2
        self.norm = nn.LayerNorm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, p.llm_hidden), nn.Linear(p.llm_hidden, p.llm_hidden)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        N, P, D = feats.shape
        r, (h, w) = self.r, self.grid
        x = (
            feats.reshape(N, h // r, r, w // r, r, D)
            .permute(0, 1, 3, 2, 4, 5)
            .reshape(N, (h // r) * (w // r), r * r * D)
        )
        return self.fc2(F.gelu(self.fc1(self.norm(x))))
