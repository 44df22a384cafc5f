"""A test workload (``tests.search.wide:Workload``): gr00t_n16 whose step holds a wide activation.

Each sample adds ``WIDE`` floats computed from a trained weight and kept for the backward (sine's
input), so the step's peak memory grows with the micro-batch far beyond the tiny model's own; the
term enters the loss times zero, so losses and gradients are gr00t_n16's. Micro-batches
(``memory.accumulation_steps``) lower the peak by holding one micro-batch's share at a time.
"""

from __future__ import annotations

import torch

from autotune.workloads.gr00t_n16.workload import Gr00tN16

WIDE = 2 * 2**20
"""Floats per sample: 8 MiB."""


class Workload(Gr00tN16):
    name = "wide"
    floats = WIDE

    def loss(self, model, batch):
        return model(batch) + self.wide_term(model, batch)

    def wide_term(self, model, batch):
        """Zero, through ``floats`` per sample kept for the backward."""
        weight = model.vlln.weight[:1]
        wide = torch.ones(batch["action"].shape[0], self.floats, device=weight.device) * weight
        return 0.0 * wide.sin().mean()
