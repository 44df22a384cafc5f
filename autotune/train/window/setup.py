"""Where every measured or profiled window starts: a warmed-up session and its device batches.

``train`` (``runner.run_training``) and ``profile`` (``profile_run.profile_config``) both open
one, so a configuration is built, fed and warmed up the same way whichever of them runs it::

    with open_window(cfg, warmup=5) as window:
        loss, norm = window.step()
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from autotune.config import TrainConfig
from autotune.train import distributed
from autotune.train.session import Session
from autotune.train.window import cost
from autotune.workloads import Batch


def loader_buffer(cfg: TrainConfig) -> int:
    """Batches the loader can hold ready (workers x prefetch factor, plus the device prefetcher).

    The workers fill this buffer while the model is built; a measured window that starts with
    it full runs a data-bound configuration faster than its loader can sustain (seen on the
    H200: stock, 2 workers, 10 steps measured 54 samples/s from a loader that sustains 36).
    Warming up at least this many steps drains it, so the window measures the steady state.
    """
    if cfg.data.source == "synthetic":
        return 0
    workers = cfg.data.num_workers
    return workers * (cfg.data.prefetch_factor or 2) + cfg.data.device_prefetch


def warmup_steps(cfg: TrainConfig, asked: int) -> int:
    """Warm-up steps of a run: as asked, but enough for a whole-step graph's capture and to drain
    the loader's buffer."""
    graph = cfg.graphs.warmup_steps + 1 if cfg.graphs.mode == "step" else 0
    return max(asked, graph, loader_buffer(cfg) + 1)


@dataclass
class Window:
    """A session of this process's rank, fed by the workload's loader through the device batches."""

    session: Session
    batches: Iterator[Batch]
    losses: list[torch.Tensor] = field(default_factory=list)
    """Device losses of every step so far, warm-up included."""
    grad_norms: list[torch.Tensor] = field(default_factory=list)
    warmup: int = 0
    """Warm-up steps run (``warmup_steps`` of what was asked)."""

    def step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One training step on the next batch; (loss, grad norm) stay on the device."""
        return self._run(next(self.batches))

    def _run(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        loss, norm = self.session.step(batch)
        self.losses.append(loss)
        self.grad_norms.append(norm)
        return loss, norm

    def warm_up(self, steps: int, step_hook: Callable[[int], None] | None = None) -> None:
        """``steps`` steps; the time spent waiting for their batches is the loader's warm-up (its
        workers start and fill their queue), the compile and capture inside them are timed as such."""
        with cost.part("warmup"):
            for i in range(steps):
                with cost.part("loader"):
                    batch = next(self.batches)
                self._run(batch)
                if step_hook:
                    step_hook(i)
        self.warmup += steps


@contextlib.contextmanager
def open_window(
    cfg: TrainConfig, warmup: int, step_hook: Callable[[int], None] | None = None
) -> Iterator[Window]:
    """The session of ``cfg`` on this rank (``torchrun``'s environment), warmed up for
    ``warmup_steps(cfg, warmup)`` steps (``step_hook(i)`` after each); closed on exit."""
    with cost.part("build"):
        rank, world, local = distributed.init_from_env()
        session = Session(cfg, rank, world, local)
    try:
        with cost.part("loader"):
            loader = session.workload.make_loader(
                cfg.preset, cfg.data, cfg.batch_size, seed=cfg.seed, rank=rank, world_size=world
            )
        window = Window(session, session.batches(loader))
        window.warm_up(warmup_steps(cfg, warmup), step_hook)
        yield window
    finally:
        session.close()
