"""The Qwen3-VL text model of Cosmos-Reason2-2B, truncated at ``select_layer`` (16), all frozen.

``forward(input_ids, image_embeds, deepstack) -> (hidden [B, L, 2048], logits [B, 1, vocab] or
None)``: token embedding, the merged image tokens scattered into the image slots, the decoder
layers, and after each of the first ``len(deepstack)`` layers that deepstack feature added at the
image positions. ``hidden`` is the last kept layer's output before the final norm (what the action
head reads); the logits are those of the last position only, through the final norm and the tied
embedding, as upstream asks (``logits_to_keep=1``); they never reach the loss (computed from a
detached input; ``compute_logits = False``, knob ``model.skip_dead_work``, skips them).

Rotary positions are Qwen3-VL's interleaved M-RoPE: text tokens have one position on all three
axes; an image's tokens share the position after the text before it on the time axis and add their
row and column in the merged grid on the other two; the text after an image continues from the
image's start plus the larger side of its grid. Frequency ``j`` of the 64 takes the row axis where
``j % 3 == 1`` and the column axis where ``j % 3 == 2`` within the sections (24, 20, 20), else time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autotune.workloads.gr00t_common.layers import BlockStack, RMSNorm
from autotune.workloads.gr00t_common.qwen3 import Qwen3Layer, image_rows, scatter_images
from autotune.workloads.gr00t_common.shape import IMG_CONTEXT_ID
from autotune.workloads.gr00t_n17.presets import Gr00tN17Preset


def mrope_axes(sections: tuple[int, int, int]) -> torch.Tensor:
    """[sum(sections)] int64: the position axis (0 time, 1 row, 2 column) of each rotary frequency."""
    axes = torch.zeros(sum(sections), dtype=torch.int64)
    for axis in (1, 2):
        axes[axis : 3 * sections[axis] : 3] = axis
    return axes


def mrope_positions(is_image: torch.Tensor, merged: tuple[int, int]) -> torch.Tensor:
    """[3, B, L] positions (time, row, column) of each token (see the module), from the image mask."""
    mh, mw = merged
    per_view = mh * mw
    k = torch.cumsum(is_image, dim=1) - 1  # running index of an image token
    j = k.remainder(per_view)
    last_of_view = is_image & (j == per_view - 1)
    step = torch.where(is_image, last_of_view * max(mh, mw), torch.ones_like(k))
    base = torch.cumsum(step, dim=1) - step
    return torch.stack([base, base + is_image * (j // mw), base + is_image * (j % mw)])


class MRoPE(nn.Module):
    """cos, sin [B, 1, L, head_dim] of the interleaved M-RoPE of a batch's token layout."""

    def __init__(self, p: Gr00tN17Preset) -> None:
        super().__init__()
        half = p.llm_head_dim // 2
        inv = 1.0 / (
            p.rope_theta ** (torch.arange(0, half, dtype=torch.float32) * 2 / p.llm_head_dim)
        )
        self.register_buffer("inv_freq", inv, persistent=False)
        self.register_buffer("axes", mrope_axes(p.mrope_sections), persistent=False)
        self.merged = (p.patch_grid[0] // p.merge, p.patch_grid[1] // p.merge)

    def forward(self, is_image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = mrope_positions(is_image, self.merged).float()  # [3, B, L]
        freqs = pos[..., None] * self.inv_freq  # [3, B, L, half]
        chosen = torch.gather(freqs, 0, self.axes.expand(1, *freqs.shape[1:3], -1)).squeeze(0)
        emb = torch.cat([chosen, chosen], dim=-1).unsqueeze(1)
        return emb.cos(), emb.sin()


class TextModel(BlockStack):
    """The ``llm_frozen`` region (see the module)."""

    def __init__(self, p: Gr00tN17Preset) -> None:
        super().__init__([Qwen3Layer(p) for _ in range(p.llm_layers)])
        self.embed_tokens = nn.Embedding(p.vocab_size, p.llm_hidden)
        self.norm = RMSNorm(p.llm_hidden)
        self.rope = MRoPE(p)
        self.compute_logits = True

    def forward(
        self, input_ids: torch.Tensor, image_embeds: torch.Tensor, deepstack: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        is_image = input_ids == IMG_CONTEXT_ID
        cos, sin = self.rope(is_image)
        x = scatter_images(self.embed_tokens(input_ids), is_image, image_embeds)
        for i, block in enumerate(self.blocks):
            x = self.call(block, x, cos, sin)
            if i < len(deepstack):
                x = torch.where(
                    is_image.unsqueeze(-1), x + image_rows(is_image, deepstack[i], x.dtype), x
                )
        if not self.compute_logits:
            return x, None
        last = self.norm(x[:, -1:].detach())
        return x, F.linear(last, self.embed_tokens.weight.to(last.dtype))
