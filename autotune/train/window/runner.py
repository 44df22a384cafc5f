"""Run a configuration for N measured steps, in this process (one rank of a torchrun job).

``run_training(cfg, steps=N)`` measures a configuration (the tuner's trials, ``verify``,
``autotune train --steps``; ``launch`` runs it on K processes). The training job that consumes
``best.yaml`` with checkpoints and resume is ``autotune.train.job.training.run_job``.
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
from autotune.train import memcap
from autotune.train.trial.record import (
    DDPBuckets,
    LoaderRate,
    Measurement,
    Memory,
    ProfileSummary,
    RankMemory,
    StepTimes,
    TrialRecord,
    model_flops_utilization,
)
from autotune.train.window import cost
from autotune.train.window.measure import (
    Stats,
    StepTimer,
    matmul_rate,
    peak_memory,
    reset_peak_memory,
)
from autotune.train.window.profile import profile_session
from autotune.train.window.setup import Window, open_window
from autotune.workloads import contract


@dataclass
class TrainResult:
    """What a measured run reports, as the library call returns it; :meth:`record` is the typed
    record the worker hands on (``autotune train --json`` prints its JSON on the last line)."""

    samples_per_s: float
    tokens_per_s: float
    step_time_ms: float
    step_time_spread_ms: dict[str, float]
    peak_memory_bytes: int
    peak_reserved_bytes: int
    peak_memory_per_rank: list[dict[str, int]]
    mfu: float
    """Of ``samples_per_s``, counting ``flops_per_sample``."""
    matmul_tflops: float
    flops_per_sample: float
    """FLOPs of one sample's step as the workload's reference runs it (gr00t_n16: upstream's, the
    discarded LM-head logits included)."""
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
    useful_flops_per_sample: float | None = None
    """FLOPs of one sample's step whose results reach the loss or a gradient (no dead work)."""
    useful_mfu: float | None = None
    """MFU counting ``useful_flops_per_sample``: the FLOPs that contribute to training."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def record(self) -> TrialRecord:
        """The run as the :class:`~autotune.train.trial.record.TrialRecord` that crosses the layers."""
        s = self.step_time_spread_ms
        measurement = Measurement(
            samples_per_s=self.samples_per_s,
            step_time=StepTimes(
                median_ms=self.step_time_ms,
                p10_ms=s["p10"],
                p90_ms=s["p90"],
                min_ms=s["min"],
                max_ms=s["max"],
                mean_ms=s["mean"],
            ),
            memory=Memory(
                allocated_bytes=self.peak_memory_bytes,
                reserved_bytes=self.peak_reserved_bytes,
                per_rank=[
                    RankMemory(int(r["allocated"]), int(r["reserved"]))
                    for r in self.peak_memory_per_rank
                ],
            ),
            loader=LoaderRate(
                window_samples_per_s=self.window_samples_per_s or self.samples_per_s,
                loader_samples_per_s=self.loader_samples_per_s,
                bound=self.loader_bound,
            ),
            mfu=self.mfu,
            world_size=self.world_size,
            losses=list(self.losses),
            grad_norms=list(self.grad_norms),
            environment=dict(self.environment),
            tokens_per_s=self.tokens_per_s,
            matmul_tflops=self.matmul_tflops,
            flops_per_sample=self.flops_per_sample,
            batch_size=self.batch_size,
            steps=self.steps,
            warmup_steps=self.warmup_steps,
            wall_s=self.wall_s,
            device=self.device,
            ddp=DDPBuckets(**self.ddp) if self.ddp is not None else None,
            config=self.config,
            useful_flops_per_sample=self.useful_flops_per_sample,
            useful_mfu=self.useful_mfu,
        )
        return TrialRecord(measurement=measurement, profile=ProfileSummary.of_summary(self.profile))


def environment(device: torch.device, world: int) -> dict[str, Any]:
    env = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "world_size": world,
        "device": device.type,
    }
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
    else:
        env["cpu"] = platform.processor() or platform.machine()
    return env


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


def run_training(
    cfg: TrainConfig,
    steps: int = 20,
    warmup: int = 5,
    *,
    step_hook=None,
    progress: Callable[[float], None] | None = None,
    profile_out: str | Path | None = None,
    profile_steps: int = 3,
    profile_if_above: float | None = None,
) -> TrainResult:
    """Train ``warmup`` + ``steps`` steps; measure the last ``steps`` (rank 0's result is aggregated).

    ``step_hook(i)``, if given, is called after each step (the profiler's ``step()``).
    ``progress(seconds)`` receives each measured step's time as soon as the device has finished
    it (without synchronising; the tuner prunes from these). With ``profile_out``, a window of
    ``profile_steps`` steps is profiled after the measured ones (so that the measurement stays
    unprofiled) into that folder and classified (``TrainResult.profile``); with ``profile_if_above``
    only when the run's samples/s reached it (the tuner profiles the trials that may become its
    incumbent: the others' profiles would cost their time and guide nothing).
    """
    with open_window(cfg, warmup, step_hook) as window:
        cost.write_counters()  # compiles are done: a run the pruner kills mid-measure keeps these
        with cost.part("measure"):
            measured = _measure(window, steps, step_hook, progress)
        ranks = Throughput.across_ranks(
            measured, cfg, window.session.world
        )  # the same on every rank
        session = window.session
        if session.cap is not None:
            # the measured window's peak against the budget (over it on any rank: out of memory on
            # the card emulated), before a profiler adds its own
            peaks = _gather(memcap.peak_bytes(session.device, session.cap), session.world)
            memcap.check_peak(
                max(peaks), session.cap.budget_bytes, (measured.losses, measured.grad_norms)
            )
        profile = None
        if profile_out is not None and (
            profile_if_above is None or ranks.samples_per_s >= profile_if_above
        ):
            with cost.part("profile"):
                profile = _profile_after(window, profile_out, profile_steps)
        matmul = matmul_rate(window.session.device)
        return _result(window, measured, ranks, profile, matmul)


@dataclass(frozen=True)
class Measured:
    """One rank's measured steps."""

    step_times: list[float]
    wall_s: float
    load_times: list[float]
    """Seconds each host batch of the measured steps took in its worker (all batches' if none was timed there)."""
    memory: dict[str, int]
    losses: list[float]
    """Of every step, warm-up included."""
    grad_norms: list[float]


def _measure(
    window: Window, steps: int, step_hook, progress: Callable[[float], None] | None
) -> Measured:
    """Time ``steps`` steps with the device synchronised only at both ends; a loss that is not
    finite raises ``TrialError`` (reason ``nan``)."""
    session, cfg = window.session, window.session.cfg
    reset_peak_memory(session.device)
    first_load = len(session.load_times)
    timer = StepTimer(session.device)
    timer.start()
    for i in range(steps):
        window.step()
        timer.lap()
        if step_hook:
            step_hook(window.warmup + i)
        if progress:
            _feed(progress, timer.poll(), session.load_times, cfg)
    step_times, wall = timer.finish()
    if progress:
        _feed(progress, step_times[timer.polled :], session.load_times, cfg)
    losses, norms = _finite_losses(window)
    loads = session.load_times[first_load:] or session.load_times
    return Measured(step_times, wall, loads, peak_memory(session.device), losses, norms)


def _feed(
    progress: Callable[[float], None],
    seconds: list[float],
    load_times: list[float],
    cfg: TrainConfig,
) -> None:
    for s in seconds:
        progress(_sustained(s, load_times, cfg))


def _finite_losses(window: Window) -> tuple[list[float], list[float]]:
    losses = torch.stack([x.float() for x in window.losses]).cpu().tolist()
    norms = torch.stack([x.float() for x in window.grad_norms]).cpu().tolist()
    bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
    if bad is not None:
        raise TrialError(f"the loss is not finite at step {bad}", "nan")
    return losses, norms


def _profile_after(window: Window, out: str | Path, steps: int) -> dict[str, Any]:
    """The profile of ``steps`` more steps; the measurement stands without it (unless out of memory)."""
    try:
        return profile_session(window.session, window.batches, out, active=steps, unprofiled=steps)
    except Exception as exc:  # noqa: BLE001
        if "out of memory" in str(exc).lower():
            raise
        return {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}


@dataclass(frozen=True)
class Throughput:
    """The window's rate over every rank, and the loader's."""

    stats: Stats
    """Of the per-step maximum over ranks: a data-parallel step ends when the slowest rank ends."""
    window_rate: float
    loader_rate: float | None
    """Every rank waits for the slowest loader: the lowest rank's rate times the ranks."""
    memory: list[dict[str, int]]
    """Peak memory of each rank."""

    @property
    def samples_per_s(self) -> float:
        return (
            self.window_rate
            if self.loader_rate is None
            else min(self.window_rate, self.loader_rate)
        )

    @classmethod
    def across_ranks(cls, measured: Measured, cfg: TrainConfig, world: int) -> Throughput:
        rank_loader = sustained_loader_rate(
            measured.load_times, cfg.data.num_workers, cfg.batch_size
        )
        per_rank = _gather(
            {"step_times": measured.step_times, "memory": measured.memory, "loader": rank_loader},
            world,
        )
        step_max = [
            max(r["step_times"][i] for r in per_rank) for i in range(len(measured.step_times))
        ]
        stats = Stats.of(step_max)
        loaders = [r["loader"] for r in per_rank if r["loader"] is not None]
        return cls(
            stats,
            cfg.batch_size * world / stats.median,
            min(loaders) * world if loaders else None,
            [r["memory"] for r in per_rank],
        )


def _result(
    window: Window,
    measured: Measured,
    ranks: Throughput,
    profile: dict[str, Any] | None,
    matmul: float,
) -> TrainResult:
    session, cfg = window.session, window.session.cfg
    world, stats, samples_per_s = session.world, ranks.stats, ranks.samples_per_s
    flops, useful = contract.checked_flops(session.workload, cfg.preset)
    return TrainResult(
        samples_per_s=samples_per_s,
        tokens_per_s=samples_per_s * session.workload.tokens_per_sample(cfg.preset),
        step_time_ms=stats.median * 1e3,
        step_time_spread_ms={
            "p10": stats.p10 * 1e3,
            "p90": stats.p90 * 1e3,
            "min": stats.minimum * 1e3,
            "max": stats.maximum * 1e3,
            "mean": stats.mean * 1e3,
        },
        peak_memory_bytes=max(m["allocated"] for m in ranks.memory),
        peak_reserved_bytes=max(m["reserved"] for m in ranks.memory),
        peak_memory_per_rank=ranks.memory,
        mfu=model_flops_utilization(flops, samples_per_s, world, matmul / 1e12),
        matmul_tflops=matmul / 1e12,
        flops_per_sample=flops,
        losses=measured.losses,
        grad_norms=measured.grad_norms,
        world_size=world,
        batch_size=cfg.batch_size,
        steps=len(measured.step_times),
        warmup_steps=window.warmup,
        wall_s=measured.wall_s,
        device=str(session.device),
        environment=environment(session.device, world),
        ddp=ddp_buckets(session.ddp) if session.ddp is not None else None,
        profile=profile,
        config=to_dict(cfg),
        window_samples_per_s=ranks.window_rate,
        loader_samples_per_s=ranks.loader_rate,
        loader_bound=samples_per_s < ranks.window_rate,
        useful_flops_per_sample=useful,
        useful_mfu=model_flops_utilization(useful, samples_per_s, world, matmul / 1e12),
    )


def ddp_buckets(ddp) -> dict[str, Any]:
    """DDP's own logging data on its gradient buckets (after its rebuild in the first steps)."""
    info = ddp._get_ddp_logging_data()
    sizes = info.get("rebuilt_bucket_sizes") or info.get("bucket_sizes") or ""
    sizes = [int(x) for x in str(sizes).split(",") if x.strip()]
    return {
        "num_buckets": len(sizes),
        "bucket_sizes": sizes,
        "bucket_cap_bytes": info.get("bucket_cap_bytes"),
        "num_buckets_reduced": info.get("num_buckets_reduced"),
        "static_graph": bool(info.get("static_graph", 0)),
    }


def _gather(obj: dict, world: int) -> list[dict]:
    if world == 1:
        return [obj]
    out: list = [None] * world
    dist.all_gather_object(out, obj)
    return out
