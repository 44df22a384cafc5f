"""A test workload (``tests.search.wider:Workload``): gr00t_n16 whose step holds a 32 MiB activation
per sample (four times ``tests/search/wide.py``'s), so that on a CPU the peaks of micro-batches of 8,
4, 2 and 1 samples lie far apart against the run-to-run noise of the process's resident set.

The study's loss parity of each rung against stock (over the budget on a CPU, stock still trains and
keeps its losses) is to measure the accumulation alone, not the noise draws: GR00T draws its flow
times, noise and dropout for the whole batch it is given, so k micro-batches draw other numbers
than one batch. Here each sample's loss is computed with the CPU generator seeded from that
sample's own values, so a sample draws the same numbers in any micro-batch; the action mask is
full and the loss is the mean of the samples' (``loss_weight`` None: equal micro-batches weigh the
same), so 8 micro-batches of one sample give one batch's loss and gradients to rounding.
"""

from __future__ import annotations

import torch

from tests.search import wide

WIDE = 8 * 2**20
"""Floats per sample: 32 MiB."""


class Workload(wide.Workload):
    name = "wider"
    floats = WIDE

    def loss_weight(self, batch):
        return None  # the loss below is a mean over samples (the mask made full)

    def loss(self, model, batch):
        batch = {**batch, "action_mask": torch.ones_like(batch["action_mask"])}
        losses = []
        for i in range(batch["action"].shape[0]):
            sample = {k: v[i : i + 1] for k, v in batch.items()}
            seed = int(sample["action"].double().abs().sum().item() * 1e6) % 2**31
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                losses.append(model(sample))
        return torch.stack(losses).mean() + self.wide_term(model, batch)
