"""Run a configuration for N measured steps, in this process (one rank of a torchrun job).

``run_training(cfg, steps=N)`` is the library call a long training job uses to take the tuner's
``best.yaml``; ``autotune train`` wraps it (and ``launch`` runs it on K processes).
"""

from __future__ import annotations

import math
import platform
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from autotune.config import TrainConfig, to_dict
from autotune.errors import TrialError
from autotune.train import distributed
from autotune.train.measure import Stats, StepTimer, matmul_rate, peak_memory, reset_peak_memory
from autotune.train.session import Session


@dataclass
class TrainResult:
    """What a measured run reports (``--json`` prints ``to_dict()`` on the last line)."""

    samples_per_s: float
    tokens_per_s: float
    step_time_ms: float
    step_time_spread_ms: dict[str, float]
    peak_memory_bytes: int
    peak_reserved_bytes: int
    peak_memory_per_rank: list[dict[str, int]]
    mfu: float
    """Of ``samples_per_s``."""
    matmul_tflops: float
    flops_per_sample: float
    losses: list[float]
    grad_norms: list[float]
    world_size: int
    batch_size: int
    steps: int
    warmup_steps: int
    wall_s: float
    device: str
    environment: dict[str, Any] = field(default_factory=dict)
    ddp: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None
    """With ``profile_out``: the profiled window's summary (overhead and classification, rank 0)."""
    config: dict[str, Any] = field(default_factory=dict)
    window_samples_per_s: float | None = None
    """What the measured window itself ran at; ``samples_per_s`` is the lower of it and the loader's."""
    loader_samples_per_s: float | None = None
    """What the loader's workers sustain (``sustained_loader_rate``); None without workers."""
    loader_bound: bool = False
    """True where the loader, not the window, sets ``samples_per_s``."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def environment(device: torch.device, world: int) -> dict[str, Any]:
    env = {"torch": torch.__version__, "python": platform.python_version(), "world_size": world, "device": device.type}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
    else:
        env["cpu"] = platform.processor() or platform.machine()
    return env


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


def sustained_loader_rate(load_times: list[float], workers: int, batch_size: int) -> float | None:
    """Samples/s that ``workers`` loader processes sustain: each makes one batch in the median of
    ``load_times`` (seconds per batch, measured in the workers), and they work in parallel.

    A short window can run from the batches the workers made ahead (while the model was built
    and captured, or while the warm-up steps were slower): medium on an H200 measured 652
    samples/s from 14 workers that make about 230. With no workers the loading is inside the
    step and the window already pays for it (None).
    """
    if workers <= 0 or not load_times:
        return None
    cost = statistics.median(load_times)
    return workers * batch_size / cost if cost > 0 else None


def _sustained(seconds: float, load_times: list[float], cfg: TrainConfig) -> float:
    """A step's time as the tuner's pruner sees it: no shorter than the loader's workers can feed
    (the same rule as ``samples_per_s``, step by step, from the batches timed so far)."""
    rate = sustained_loader_rate(load_times, cfg.data.num_workers, cfg.batch_size)
    return max(seconds, cfg.batch_size / rate) if rate else seconds


def run_training(cfg: TrainConfig, steps: int = 20, warmup: int = 5, *, step_hook=None,
                 progress: Callable[[float], None] | None = None, profile_out: str | Path | None = None,
                 profile_steps: int = 3) -> TrainResult:
    """Train ``warmup`` + ``steps`` steps; measure the last ``steps`` (rank 0's result is aggregated).

    ``step_hook(i)``, if given, is called after each step (the profiler's ``step()``).
    ``progress(seconds)`` receives each measured step's time as soon as the device has finished
    it (without synchronising; the tuner prunes from these). With ``profile_out``, a window of
    ``profile_steps`` steps is profiled after the measured ones (so that the measurement stays
    unprofiled) into that folder and classified (``TrainResult.profile``).
    """
    rank, world, local = distributed.init_from_env()
    session = Session(cfg, rank, world, local)
    device = session.device
    loader = session.workload.make_loader(cfg.preset, cfg.data, cfg.batch_size, seed=cfg.seed, rank=rank, world_size=world)
    batches = session.batches(loader)
    losses, norms = [], []
    warmup = warmup_steps(cfg, warmup)
    for i in range(warmup):
        loss, norm = session.step(next(batches))
        losses.append(loss)
        norms.append(norm)
        if step_hook:
            step_hook(i)
    reset_peak_memory(device)
    first_load = len(session.load_times)
    timer = StepTimer(device)
    timer.start()
    for i in range(steps):
        loss, norm = session.step(next(batches))
        losses.append(loss)
        norms.append(norm)
        timer.lap()
        if step_hook:
            step_hook(warmup + i)
        if progress:
            for seconds in timer.poll():
                progress(_sustained(seconds, session.load_times, cfg))
    step_times, wall = timer.finish()
    loads = session.load_times[first_load:] or session.load_times
    if progress:
        for seconds in step_times[timer.polled:]:
            progress(_sustained(seconds, session.load_times, cfg))
    loss_values = torch.stack([x.float() for x in losses]).cpu().tolist()
    norm_values = torch.stack([x.float() for x in norms]).cpu().tolist()
    if any(not math.isfinite(v) for v in loss_values):
        raise TrialError(f"the loss is not finite at step {next(i for i, v in enumerate(loss_values) if not math.isfinite(v))}", "nan")
    mem = peak_memory(device)
    profile = None
    if profile_out is not None:
        from autotune.train.profile_run import profile_session

        try:  # the measurement stands without its profile
            profile = profile_session(session, batches, profile_out, active=profile_steps, unprofiled=profile_steps)
        except Exception as exc:  # noqa: BLE001
            if "out of memory" in str(exc).lower():
                raise
            profile = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    rate = matmul_rate(device)
    rank_loader = sustained_loader_rate(loads, cfg.data.num_workers, cfg.batch_size)
    per_rank = _gather({"step_times": step_times, "memory": mem, "loader": rank_loader}, world)
    # A data-parallel step ends when the slowest rank ends: take the per-step maximum over ranks.
    step_max = [max(r["step_times"][i] for r in per_rank) for i in range(len(step_times))]
    stats = Stats.of(step_max)
    window_rate = cfg.batch_size * world / stats.median
    rank_loaders = [r["loader"] for r in per_rank if r["loader"] is not None]
    loader_rate = min(rank_loaders) * world if rank_loaders else None  # every rank waits for the slowest loader
    samples_per_s = min(window_rate, loader_rate) if loader_rate is not None else window_rate
    flops = session.workload.flops_per_sample(cfg.preset)
    ddp_info = ddp_buckets(session.ddp) if session.ddp is not None else None
    session.close()
    return TrainResult(
        samples_per_s=samples_per_s,
        tokens_per_s=samples_per_s * session.workload.tokens_per_sample(cfg.preset),
        step_time_ms=stats.median * 1e3,
        step_time_spread_ms={"p10": stats.p10 * 1e3, "p90": stats.p90 * 1e3, "min": stats.minimum * 1e3,
                             "max": stats.maximum * 1e3, "mean": stats.mean * 1e3},
        peak_memory_bytes=max(r["memory"]["allocated"] for r in per_rank),
        peak_reserved_bytes=max(r["memory"]["reserved"] for r in per_rank),
        peak_memory_per_rank=[r["memory"] for r in per_rank],
        mfu=flops * samples_per_s / world / rate,
        matmul_tflops=rate / 1e12,
        flops_per_sample=flops,
        losses=loss_values,
        grad_norms=norm_values,
        world_size=world,
        batch_size=cfg.batch_size,
        steps=steps,
        warmup_steps=warmup,
        wall_s=wall,
        device=str(device),
        environment=environment(device, world),
        ddp=ddp_info,
        profile=profile,
        config=to_dict(cfg),
        window_samples_per_s=window_rate,
        loader_samples_per_s=loader_rate,
        loader_bound=samples_per_s < window_rate,
    )


def ddp_buckets(ddp) -> dict[str, Any]:
    """DDP's own logging data on its gradient buckets (after its rebuild in the first steps)."""
    info = ddp._get_ddp_logging_data()
    sizes = info.get("rebuilt_bucket_sizes") or info.get("bucket_sizes") or ""
    sizes = [int(x) for x in str(sizes).split(",") if x.strip()]
    return {"num_buckets": len(sizes), "bucket_sizes": sizes, "bucket_cap_bytes": info.get("bucket_cap_bytes"),
            "num_buckets_reduced": info.get("num_buckets_reduced"), "static_graph": bool(info.get("static_graph", 0))}


def _gather(obj: dict, world: int) -> list[dict]:
    if world == 1:
        return [obj]
    out: list = [None] * world
    dist.all_gather_object(out, obj)
    return out

