"""A profiling window of a configuration: ``autotune profile --config X --out DIR``.

The configuration is built exactly as ``train`` builds it, warmed up (graph capture and
compilation included), then one window of steps runs under ``torch.profiler``
(``autotune.profiling.profile_window``): one gzipped trace per rank in ``DIR``, the profiler's
overhead measured against unprofiled steps of the same run, and rank 0 classifies the folder
into ``DIR/classification.summary`` (JSON; not named .json, so that the folder stays a folder of traces).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch.distributed as dist

from autotune.config import TrainConfig
from autotune.config.io import write_text_atomic
from autotune.train.session import Session
from autotune.train.window.setup import open_window


def profile_config(
    cfg: TrainConfig, out_dir: str | Path, *, warmup: int = 5, active: int = 5, unprofiled: int = 5
) -> dict[str, Any]:
    """Warm ``cfg`` up as ``train`` does (``open_window``), then profile one window into ``out_dir``."""
    with open_window(cfg, warmup) as window:
        return profile_session(
            window.session, window.batches, out_dir, active=active, unprofiled=unprofiled
        )


def profile_session(
    session: Session,
    batches: Iterator,
    out_dir: str | Path,
    *,
    active: int = 5,
    unprofiled: int = 5,
) -> dict[str, Any]:
    """Profile one window of a warmed-up session; rank 0 classifies it (all ranks must call)."""
    from autotune.profiling import classify, data_wait, profile_window

    rank, world = session.rank, session.world

    def step() -> None:
        with data_wait():
            batch = next(batches)
        session.step(batch)

    window = profile_window(
        step,
        out_dir=out_dir,
        rank=rank,
        world_size=world,
        wait=1,
        warmup=2,
        active=active,
        unprofiled_steps=unprofiled,
    )
    if world > 1:
        dist.barrier()
    summary: dict[str, Any] = {
        "profiled_step_ms": window.profiled_step_ms,
        "unprofiled_step_ms": window.unprofiled_step_ms,
        "overhead": window.overhead,
    }
    if rank == 0:
        summary["classification"] = classify(Path(out_dir)).to_dict()
        write_text_atomic(Path(out_dir) / "classification.summary", json.dumps(summary, indent=1))
    return summary
