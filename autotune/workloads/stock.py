"""Stock configurations by workload name: what every speed-up is measured against.

Each workload gives its own (``Workload.stock_config``): autotune tunes how a step runs, never what
it computes, so the optimizer's hyper-parameters, the data and the model come from the workload and
stay as they are in every trial.
"""

from __future__ import annotations

import copy

import torch

from autotune.config import OptimizerConfig, TrainConfig
from autotune.config.knob import walk
from autotune.workloads.registry import get_workload


def stock_config(
    workload: str, preset: str | None = None, *, cuda: bool | None = None
) -> TrainConfig:
    """The stock configuration of ``workload`` at ``preset`` (None: the workload's preset for this machine)."""
    w = get_workload(workload)
    preset = preset or w.preset_for(torch.cuda.is_available() if cuda is None else cuda)
    w.check_preset(preset)
    cfg = w.stock_config(preset)
    cfg.workload = workload  # the name it was asked by (a package.module:Class spec stays one)
    return cfg


def stock_like(cfg: TrainConfig) -> TrainConfig:
    """The stock configuration ``cfg`` is compared with: its workload's, with everything of ``cfg``
    that is not a knob (seed, batch, device, data, model, the optimizer's hyper-parameters)."""
    stock = stock_config(cfg.workload, cfg.preset)
    stock.seed, stock.batch_size, stock.device = cfg.seed, cfg.batch_size, cfg.device
    for name in ("source", "dataset", "episodes", "video_backend"):
        setattr(stock.data, name, getattr(cfg.data, name))
    stock.model = copy.deepcopy(cfg.model)
    knobs = {d.key: getattr(stock.optimizer, d.key) for d in walk(OptimizerConfig) if d.spec.group}
    stock.optimizer = copy.deepcopy(cfg.optimizer)
    for key, value in knobs.items():  # its knobs stock's: how the update runs, where its state is
        setattr(stock.optimizer, key, value)
    return stock
