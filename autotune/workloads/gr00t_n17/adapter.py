"""The VL self-attention adapter (``vl_self_attention``): transformer blocks over ``vlln``'s output.

Upstream's ``SelfAttentionTransformer`` of ``BasicTransformerBlock``s (gr00t/model/modules/dit.py)
with the released checkpoint's ``vl_self_attention_cfg``: 4 blocks of 32 heads x 64 (width 2048, the
backbone's), no positional embedding, dropout 0.2 with a final dropout. A block: LayerNorm (affine)
-> self-attention (biases) over every VL token, padding included (upstream passes no mask) ->
dropout + residual; LayerNorm (affine) -> FFN 4x (GELU-tanh, dropout inside) -> residual.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autotune.workloads.gr00t_common.dit import DiTAttention
from autotune.workloads.gr00t_common.layers import BlockStack
from autotune.workloads.gr00t_n17.presets import Gr00tN17Preset


class AdapterBlock(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.norm1, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn1 = DiTAttention(dim, heads, dim, dropout)
        self.ff_in, self.ff_out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.dropout1, self.ff_dropout = nn.Dropout(dropout), nn.Dropout(dropout)
        self.ff_final_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.dropout1(self.attn1(h, h, None))
        h = self.ff_dropout(F.gelu(self.ff_in(self.norm3(x)), approximate="tanh"))
        return x + self.ff_final_dropout(self.ff_out(h))


class VLAdapter(BlockStack):
    """The ``vl_adapter`` region: ``forward(vl [B, L, 2048]) -> [B, L, 2048]``."""

    def __init__(self, p: Gr00tN17Preset) -> None:
        super().__init__([AdapterBlock(p.adapter_width, p.adapter_heads, p.dropout)
                          for _ in range(p.adapter_layers)])  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run(x)
