"""Embodiment-specific projectors: a weight slot per embodiment, gathered per sample."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autotune.workloads.gr00t_common.layers import sinusoidal
from autotune.workloads.gr00t_common.shape import Gr00tSizes


def slot_groups(
    cat_ids: torch.Tensor, slots: int, tokens: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The samples in slot order (a stable sort) and the grouped GEMM's offsets: ``offs[s]`` is the
    end, in tokens, of slot ``s``'s rows. Static shapes and no host sync (the counts compare ids
    with every slot instead of ``bincount``, whose output size depends on the data)."""
    order = torch.argsort(cat_ids, stable=True)
    counts = (cat_ids.unsqueeze(0) == torch.arange(slots, device=cat_ids.device).unsqueeze(1)).sum(
        1
    )
    return order, (torch.cumsum(counts, 0) * tokens).to(torch.int32)


def grouped_supported(device: str, dtype: torch.dtype, d_in: int, d_out: int) -> bool:
    """Whether ``torch._grouped_mm`` has a kernel for rows of ``d_in`` times weights ``[d_in, d_out]``:
    on either device its operands' row strides must be multiples of 16 bytes (GR00T N1.7's 132-wide
    state and action layers in bf16 are not); any dtype on the CPU, bf16 only on CUDA."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    aligned = all(width * dtype.itemsize % 16 == 0 for width in (d_in, d_out))
    if device == "cpu":
        return aligned
    return device == "cuda" and dtype == torch.bfloat16 and aligned


class CategorySpecificLinear(nn.Module):
    """Weight [slots, in, out] and bias [slots, out]; each sample uses its embodiment's slot.

    ``matmul = "gather"`` (upstream): the forward gathers each sample's slot (a copy of its weights
    per sample) and does a batched matmul; the backward scatters into dense gradients for every
    slot, and AdamW updates all of them. ``matmul = "grouped"``: the samples are sorted by slot and
    one grouped GEMM multiplies each slot's rows by that slot's weights, read in place; its
    backward gives the same dense gradients (zeros for slots no sample used). The same FLOPs; the
    weights are read once per used slot instead of copied once per sample. On CUDA the grouped GEMM
    exists for bf16 only, and on either device for rows of a multiple of 16 bytes: a region computing
    in fp32 on CUDA, or a layer of another width, takes the gather path.
    """

    def __init__(self, slots: int, d_in: int, d_out: int) -> None:
        super().__init__()
        self.W = nn.Parameter(torch.randn(slots, d_in, d_out) * d_in**-0.5)
        self.b = nn.Parameter(torch.zeros(slots, d_out))
        self.matmul = "gather"

    def forward(self, x: torch.Tensor, cat_ids: torch.Tensor) -> torch.Tensor:
        bias = self.b[cat_ids].unsqueeze(1).to(x.dtype)
        d_in, d_out = self.W.shape[1:]
        if self.matmul == "grouped" and grouped_supported(x.device.type, x.dtype, d_in, d_out):
            return self._grouped(x, cat_ids) + bias
        return torch.bmm(x, self.W[cat_ids].to(x.dtype)) + bias

    def _grouped(self, x: torch.Tensor, cat_ids: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        order, offs = slot_groups(cat_ids, self.W.shape[0], T)
        rows = x.index_select(0, order).reshape(B * T, -1)
        out = torch._grouped_mm(rows, self.W.to(x.dtype), offs=offs).view(B, T, -1)
        return out.index_select(0, torch.argsort(order))  # back to the batch's order


class CategorySpecificMLP(nn.Module):
    def __init__(self, slots: int, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.layer1 = CategorySpecificLinear(slots, d_in, hidden)
        self.layer2 = CategorySpecificLinear(slots, hidden, d_out)

    def forward(self, x: torch.Tensor, cat_ids: torch.Tensor) -> torch.Tensor:
        return self.layer2(F.relu(self.layer1(x, cat_ids)), cat_ids)


class ActionEncoder(nn.Module):
    """W1(actions) ++ sinusoidal(t) -> W2 -> swish -> W3."""

    def __init__(self, p: Gr00tSizes) -> None:
        super().__init__()
        w = p.dit_width
        self.width = w
        self.W1 = CategorySpecificLinear(p.num_embodiments, p.action_dim, w)
        self.W2 = CategorySpecificLinear(p.num_embodiments, 2 * w, w)
        self.W3 = CategorySpecificLinear(p.num_embodiments, w, w)

    def forward(
        self, actions: torch.Tensor, t_disc: torch.Tensor, cat_ids: torch.Tensor
    ) -> torch.Tensor:
        a = self.W1(actions, cat_ids)
        tau = sinusoidal(t_disc.unsqueeze(1).expand(-1, actions.shape[1]), self.width).to(a.dtype)
        return self.W3(F.silu(self.W2(torch.cat([a, tau], dim=-1), cat_ids)), cat_ids)


class Projectors(nn.Module):
    """The ``projectors`` region: state encoder, action encoder, action decoder."""

    def __init__(self, p: Gr00tSizes) -> None:
        super().__init__()
        self.state_encoder = CategorySpecificMLP(
            p.num_embodiments, p.state_dim, p.state_hidden, p.dit_width
        )
        self.action_encoder = ActionEncoder(p)
        self.action_decoder = CategorySpecificMLP(
            p.num_embodiments, p.dit_out, p.decoder_hidden, p.action_dim
        )
