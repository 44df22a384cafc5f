"""The stock configuration: what a user gets from the upstream GR00T N1.6 fine-tuning defaults.

bf16 autocast + TF32; frozen weights stored in bf16, trainable in fp32; DDP with 100 MB buckets
(no static graph, no gradient views, no compression); 2 loader workers with pinned memory,
persistent workers and torch's default prefetch; no device prefetcher; no CUDA graphs; no
torch.compile; no activation checkpointing; plain AdamW (torch's default for-each kernels);
16 samples per GPU. These are exactly the defaults of :class:`TrainConfig`, so every speed-up this
project reports is against ``stock_config()``.
"""

from __future__ import annotations

import copy

from autotune.config.training import TrainConfig


def stock_config(workload: str = "gr00t_n16", preset: str = "full", *, like: TrainConfig | None = None) -> TrainConfig:
    """The stock configuration; ``like`` carries over what is not a knob (seed, batch, data source, device)."""
    cfg = TrainConfig(workload=workload, preset=preset)
    if like is not None:
        cfg.workload, cfg.preset, cfg.seed, cfg.batch_size, cfg.device = (
            like.workload, like.preset, like.seed, like.batch_size, like.device)
        cfg.data.source, cfg.data.dataset, cfg.data.episodes = like.data.source, like.data.dataset, like.data.episodes
        cfg.optimizer = copy.deepcopy(like.optimizer)
        cfg.optimizer.impl = "foreach"
    return cfg
