"""A test workload (``tests.search.wider:Workload``): gr00t_n16 whose step holds a 32 MiB activation
per sample (four times ``tests/search/wide.py``'s), so that on a CPU the peaks of micro-batches of 8,
4, 2 and 1 samples lie far apart against the run-to-run noise of the process's resident set.

Its action mask is full: the loss is a masked mean per micro-batch, so micro-batches compute the
one batch's loss only where they hold equal shares of the mask, and the study's loss parity of
each rung against stock (over the budget on a CPU, stock still trains and keeps its losses) then
measures the accumulation alone. With the synthetic data's uneven masks, 8 micro-batches of one
sample measured gradient norms 12.7 % above one batch of 8 over 11 steps (0.2 % with full masks).
"""

from __future__ import annotations

import torch

from autotune.workloads.gr00t_n16.workload import Gr00tN16

WIDE = 8 * 2**20
"""Floats per sample: 32 MiB."""


class Workload(Gr00tN16):
    name = "wider"

    def loss(self, model, batch):
        batch = {**batch, "action_mask": torch.ones_like(batch["action_mask"])}
        loss = model(batch)
        weight = model.vlln.weight[:1]
        wide = torch.ones(batch["action"].shape[0], WIDE, device=weight.device) * weight
        return loss + 0.0 * wide.sin().mean()
