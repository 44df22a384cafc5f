"""Profile a window of training steps and measure what profiling itself costs.

Usage (inside a training process; each rank calls it with the same ``out_dir``)::

    from autotune.profiling import data_wait, profile_window

    def step():
        with data_wait():
            batch = next(batches)
        train_step(batch)

    result = profile_window(step, out_dir="runs/x/profile", rank=rank, world_size=world)

The window runs ``wait + warmup + active`` steps under ``torch.profiler.profile`` with a
schedule, so the trace holds ``ProfilerStep#N`` markers for the ``active`` steps, then runs
``unprofiled_steps`` more without the profiler. Every step is timed to the end of its device
work (``torch.cuda.synchronize``), and the medians of the two groups give the profiler's
overhead in the same run. Each rank writes ``rank{R}.pt.trace.json.gz``; the file carries
``distributedInfo`` (torch writes it when ``torch.distributed`` is initialised, we add it
otherwise) and the run id under ``autotune_run_id``, so that traces of two runs mixed in one
folder are detected by the classifier. On CUDA the trace holds, by default, only the spans the
classifier needs, not every operator (``detail``, :mod:`autotune.profiling.detail`): each
recorded operator is a profiler callback, ~37,000 of them in an eager step of ``full``.

One window per process: on CUDA 13.0, CUPTI gives CUDA-graph kernels wrong correlation ids in
a process's later profiling sessions (NVIDIA's CUPTI 13.1 Update 1 notes), and has been
reported to trace no kernel at all once a graph was captured between two sessions (see
:mod:`autotune.profiling.attribution`); ``autotune profile`` and the tuner's trials therefore
profile in fresh processes.
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from autotune.errors import ConfigError
from autotune.profiling.detail import profiler_options, recorded_scopes, resolve_detail
from autotune.profiling.trace import DETAIL_KEY, RUN_ID_KEY

DATA_WAIT = "autotune.data_wait"
"""Name of the span that marks the host waiting for the next batch."""


def data_wait() -> AbstractContextManager:
    """A ``record_function`` span that the classifier counts as waiting on the data loader."""
    return record_function(DATA_WAIT)


def trace_name(rank: int) -> str:
    return f"rank{rank}.pt.trace.json.gz"


@dataclass(frozen=True)
class ProfileWindowResult:
    """What one rank's profiling window produced."""

    out_dir: Path
    trace_path: Path
    """This rank's trace."""
    rank: int
    world_size: int
    run_id: str
    profiled_ms: tuple[float, ...]
    """Times of the ``active`` (traced) steps."""
    unprofiled_ms: tuple[float, ...]
    """Times of the steps run after the window, without the profiler."""
    detail: str
    """What the trace records: ``"ops"`` or ``"spans"`` (:mod:`autotune.profiling.detail`)."""

    @property
    def trace_paths(self) -> tuple[Path, ...]:
        """Where every rank of the run writes its trace."""
        return tuple(self.out_dir / trace_name(r) for r in range(self.world_size))

    @property
    def profiled_step_ms(self) -> float:
        return statistics.median(self.profiled_ms)

    @property
    def unprofiled_step_ms(self) -> float:
        return statistics.median(self.unprofiled_ms)

    @property
    def overhead(self) -> float:
        """Median profiled step time over median unprofiled step time, minus one."""
        return self.profiled_step_ms / self.unprofiled_step_ms - 1.0


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _timed(step_fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    step_fn()
    _sync()
    return (time.perf_counter() - t0) * 1000.0


def _shared_run_id(run_id: str | None) -> str:
    """The caller's run id, else one drawn on rank 0 and broadcast to every rank."""
    if run_id is not None:
        return str(run_id)
    ids = [uuid.uuid4().hex[:12]]
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast_object_list(ids, src=0)
    return ids[0]


def stamp_trace(
    src: Path, dst: Path, *, rank: int, world_size: int, run_id: str, detail: str = "ops"
) -> None:
    """Copy an exported trace to ``dst`` (gzipped) with the run id, the detail and ``distributedInfo``.

    The keys go right after the opening brace, as text, so a large trace is not parsed again.
    """
    text = src.read_text(encoding="utf-8")
    brace = text.index("{") + 1
    head = text[: text.find('"traceEvents"')]
    extra = {RUN_ID_KEY: run_id, DETAIL_KEY: detail}
    if '"distributedInfo"' not in head:
        extra["distributedInfo"] = {"backend": "none", "rank": rank, "world_size": world_size}
    # HTA finds the rank with the regex '"rank":\s+(\d+)', hence json.dumps' default spacing.
    keys = json.dumps(extra)[1:-1]
    tmp = dst.with_name(dst.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=4) as fh:
        fh.write(text[:brace])
        fh.write(keys + ",")
        fh.write(text[brace:])
    os.replace(tmp, dst)


def _check(
    wait: int, warmup: int, active: int, unprofiled_steps: int, rank: int, world_size: int
) -> None:
    for name, value, low in (
        ("wait", wait, 0),
        ("warmup", warmup, 0),
        ("active", active, 1),
        ("unprofiled_steps", unprofiled_steps, 1),
        ("world_size", world_size, 1),
        ("rank", rank, 0),
    ):
        if not isinstance(value, int) or value < low:
            raise ConfigError(f"profile_window.{name}: must be an integer >= {low}, got {value!r}")
    if rank >= world_size:
        raise ConfigError(f"profile_window.rank: {rank} is not below world_size {world_size}")


def profile_window(
    step_fn: Callable[[], object],
    *,
    out_dir: str | Path,
    rank: int = 0,
    world_size: int = 1,
    wait: int = 1,
    warmup: int = 2,
    active: int = 5,
    unprofiled_steps: int = 5,
    run_id: str | None = None,
    detail: str = "auto",
) -> ProfileWindowResult:
    """Run ``step_fn`` under the profiler for one window, then unprofiled; write this rank's trace.

    ``step_fn`` runs ``wait + warmup + active + unprofiled_steps`` times in all. Collective:
    with ``torch.distributed`` initialised and no ``run_id``, every rank must call it.
    ``detail`` says what the trace records (:mod:`autotune.profiling.detail`): ``"auto"``
    records only the spans the classifier needs on CUDA, every operator on CPU.
    """
    _check(wait, warmup, active, unprofiled_steps, rank, world_size)
    cuda = torch.cuda.is_available()
    detail = resolve_detail(detail, cuda)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run_id = _shared_run_id(run_id)
    activities = [ProfilerActivity.CPU]
    if cuda:
        activities.append(ProfilerActivity.CUDA)
    profiled: list[float] = []
    with tempfile.TemporaryDirectory(dir=out, prefix=".export-") as tmp:
        raw = Path(tmp) / "trace.json"
        with (
            recorded_scopes(detail),
            profile(
                activities=activities,
                schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
                on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
                **profiler_options(detail),
            ) as prof,
        ):
            for i in range(wait + warmup + active):
                ms = _timed(step_fn)
                if i >= wait + warmup:
                    profiled.append(ms)
                prof.step()
        dst = out / trace_name(rank)
        stamp_trace(raw, dst, rank=rank, world_size=world_size, run_id=run_id, detail=detail)
    unprofiled = [_timed(step_fn) for _ in range(unprofiled_steps)]
    return ProfileWindowResult(
        out_dir=out,
        trace_path=dst,
        rank=rank,
        world_size=world_size,
        run_id=run_id,
        profiled_ms=tuple(profiled),
        unprofiled_ms=tuple(unprofiled),
        detail=detail,
    )
