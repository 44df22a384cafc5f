"""The stock configuration: what a user gets from the upstream GR00T N1.6 fine-tuning defaults.

bf16 autocast + TF32; frozen weights stored in bf16, trainable in fp32; DDP with 100 MB buckets
(no static graph, no gradient views, no compression); 2 loader workers with pinned memory,
persistent workers and torch's default prefetch; no device prefetcher; no CUDA graphs; no
torch.compile; no activation checkpointing; plain AdamW (torch's default for-each kernels);
16 samples per GPU. These are exactly the defaults of :class:`TrainConfig`, so every speed-up this
project reports is against ``stock_config()``.
"""

from __future__ import annotations

from autotune.config.training import TrainConfig


def stock_config(workload: str = "gr00t_n16", preset: str = "full") -> TrainConfig:
    """GR00T N1.6's stock configuration (the defaults of :class:`TrainConfig`, reading its LeRobot data).

    Every workload's stock configuration, this one included, comes from its own
    ``Workload.stock_config`` (``autotune.workloads.stock.stock_config`` picks it by name).
    """
    cfg = TrainConfig(workload=workload, preset=preset)
    cfg.data.source = "lerobot"
    return cfg
