"""Embodiment-specific projectors: a weight slot per embodiment, gathered per sample."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autotune.workloads.gr00t_n16.layers import sinusoidal
from autotune.workloads.gr00t_n16.presets import Gr00tPreset


class CategorySpecificLinear(nn.Module):
    """Weight [slots, in, out] and bias [slots, out]; each sample uses its embodiment's slot.

    The forward gathers the rows of each sample's id (a per-sample copy) and does a batched
    matmul; the backward scatters into dense gradients for every slot, and AdamW updates all of
    them (as upstream does).
    """

    def __init__(self, slots: int, d_in: int, d_out: int) -> None:
        super().__init__()
        self.W = nn.Parameter(torch.randn(slots, d_in, d_out) * d_in**-0.5)
        self.b = nn.Parameter(torch.zeros(slots, d_out))

    def forward(self, x: torch.Tensor, cat_ids: torch.Tensor) -> torch.Tensor:
        return torch.bmm(x, self.W[cat_ids].to(x.dtype)) + self.b[cat_ids].unsqueeze(1).to(x.dtype)


class CategorySpecificMLP(nn.Module):
    def __init__(self, slots: int, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.layer1 = CategorySpecificLinear(slots, d_in, hidden)
        self.layer2 = CategorySpecificLinear(slots, hidden, d_out)

    def forward(self, x: torch.Tensor, cat_ids: torch.Tensor) -> torch.Tensor:
        return self.layer2(F.relu(self.layer1(x, cat_ids)), cat_ids)


class ActionEncoder(nn.Module):
    """W1(actions) ++ sinusoidal(t) -> W2 -> swish -> W3."""

    def __init__(self, p: Gr00tPreset) -> None:
        super().__init__()
        w = p.dit_width
        self.width = w
        self.W1 = CategorySpecificLinear(p.num_embodiments, p.action_dim, w)
        self.W2 = CategorySpecificLinear(p.num_embodiments, 2 * w, w)
        self.W3 = CategorySpecificLinear(p.num_embodiments, w, w)

    def forward(self, actions: torch.Tensor, t_disc: torch.Tensor, cat_ids: torch.Tensor) -> torch.Tensor:
        a = self.W1(actions, cat_ids)
        tau = sinusoidal(t_disc.unsqueeze(1).expand(-1, actions.shape[1]), self.width).to(a.dtype)
        return self.W3(F.silu(self.W2(torch.cat([a, tau], dim=-1), cat_ids)), cat_ids)


class Projectors(nn.Module):
    """The ``projectors`` region: state encoder, action encoder, action decoder."""

    def __init__(self, p: Gr00tPreset) -> None:
        super().__init__()
        self.state_encoder = CategorySpecificMLP(p.num_embodiments, p.state_dim, p.state_hidden, p.dit_width)
        self.action_encoder = ActionEncoder(p)
        self.action_decoder = CategorySpecificMLP(p.num_embodiments, p.dit_out, p.decoder_hidden, p.action_dim)
