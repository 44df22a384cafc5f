"""The record of one run: what a worker reports, what ``launch`` returns, what a study keeps.

One typed record crosses every layer. The worker (:mod:`autotune.train.trial.worker`) makes it once,
from the runner's :class:`~autotune.train.window.runner.TrainResult` or from the failure it caught;
:func:`autotune.train.trial.launch.launch` returns it, also for a run that timed out, was pruned,
crashed or was killed; a study stores its JSON in the trial (:mod:`autotune.search.trials`, the
one reader and writer of the trial's attributes), and the guide, the report and the benchmarks
read it back from there. It imports only the configuration's plain-data converter and the
errors, so that every layer may import it.

A record holds a ``measurement`` (the measured window), a ``profile`` (the profiled window after
it, or instead of it for ``autotune profile``) and a ``failure``; a failed run has no measurement.
Beside them: the host's load when the run started (``host``), where its wall time went (``cost``)
and, for a noisy measurement the tuner did not take on its word, the record of a second run
(``remeasure``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from autotune.config import from_dict, to_dict
from autotune.errors import ConfigError

VERSION = 1
INTERRUPTED = "interrupted"
"""Failure reason of a run that its machinery lost before it ended (its tuner stopped, its worker or
the warm parent that forked it died): says nothing of the configuration; a study queues it again."""
"""Of the record's JSON; a reader refuses a newer one rather than misread it."""


def model_flops_utilization(
    flops_per_sample: float, samples_per_s: float, world_size: int, matmul_tflops: float
) -> float:
    """MFU: the one definition every figure of autotune uses (``train``, a study's trials and
    ``trials.csv``, the report, the GPU suite's table).

    The model FLOP/s of one process (``flops_per_sample`` x ``samples_per_s`` / ``world_size``) over
    the dense matmul rate measured on the same device in the same run, right after the measured
    window (:func:`autotune.train.window.measure.matmul_rate`: bf16 8192^3 on CUDA, fp32 on a CPU),
    so the peak is what that device sustained under the same clocks, heat and neighbours, and a
    record's MFU follows from the record alone (``Measurement.matmul_tflops``, the argument as
    stored, so that a figure recomputed from a record is the same float). The FLOPs are
    upstream's count of a step (``flops_per_sample``, dead work included: the model as shipped does
    that work) for ``mfu``, and those that reach the loss or a gradient (``useful_flops_per_sample``)
    for ``useful_mfu``."""
    return flops_per_sample * samples_per_s / world_size / (matmul_tflops * 1e12)


@dataclass(frozen=True)
class StepTimes:
    """Step time over the measured window, milliseconds; per step, the slowest rank's."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float
    mean_ms: float

    @property
    def spread(self) -> float:
        """The p10-p90 width relative to the median (0.1: the middle 80 % of the steps lie within 10 % of
        the median's length); 0 where there is no median."""
        return (self.p90_ms - self.p10_ms) / self.median_ms if self.median_ms > 0 else 0.0


@dataclass(frozen=True)
class RankMemory:
    allocated_bytes: int
    reserved_bytes: int


@dataclass(frozen=True)
class Memory:
    """Peak device memory (on a CPU the process's peak resident set): the largest of the ranks'."""

    allocated_bytes: int
    reserved_bytes: int | None = None
    """None where a study predates it."""
    per_rank: list[RankMemory] = field(default_factory=list)


@dataclass(frozen=True)
class LoaderRate:
    """What the measured window ran at against what the loader's workers sustain."""

    window_samples_per_s: float
    """What the measured window itself ran at (from the batches the workers had made ahead, too)."""
    loader_samples_per_s: float | None = None
    """What the workers sustain (``sustained_loader_rate``); None without workers: the loading is in the step."""
    bound: bool = False
    """True where the loader, not the window, set ``Measurement.samples_per_s``."""


@dataclass(frozen=True)
class DDPBuckets:
    """DDP's own logging data on its gradient buckets (after its rebuild in the first steps)."""

    num_buckets: int
    bucket_sizes: list[int]
    bucket_cap_bytes: int | None
    num_buckets_reduced: int | None
    static_graph: bool


@dataclass(frozen=True)
class Measurement:
    """The measured window of a run (rank 0's, aggregated over the ranks).

    The fields with a default are None in the records of studies that predate them.
    """

    samples_per_s: float
    """The lower of the window's rate and the loader's (``loader``)."""
    step_time: StepTimes
    memory: Memory
    loader: LoaderRate
    mfu: float
    """Of ``samples_per_s``: :func:`model_flops_utilization` of ``flops_per_sample`` against
    ``matmul_tflops``."""
    world_size: int
    losses: list[float]
    """Every step's, the warm-up's included."""
    grad_norms: list[float]
    environment: dict[str, Any] = field(default_factory=dict)
    """Versions and device names (torch, python, gpu or cpu, cuda)."""
    tokens_per_s: float | None = None
    matmul_tflops: float | None = None
    flops_per_sample: float | None = None
    batch_size: int | None = None
    """Per process."""
    steps: int | None = None
    """Measured steps."""
    warmup_steps: int | None = None
    wall_s: float | None = None
    device: str | None = None
    ddp: DDPBuckets | None = None
    config: dict[str, Any] | None = None
    """The configuration as run (``autotune.config.to_dict``)."""
    useful_flops_per_sample: float | None = None
    """FLOPs of one sample's step whose results reach the loss or a gradient (no dead work)."""
    useful_mfu: float | None = None
    """``mfu`` counting ``useful_flops_per_sample``."""


@dataclass(frozen=True)
class ProfileSummary:
    """A profiled window: the profiler's overhead and rank 0's classification of its traces."""

    profiled_step_ms: float | None = None
    unprofiled_step_ms: float | None = None
    overhead: float | None = None
    """Profiled over unprofiled step time, minus one."""
    buckets: dict[str, float] | None = None
    """Fraction of the step per time bucket; None where nothing was classified (ranks other than 0)."""
    dominant: str | None = None
    step_time_ms: float | None = None
    """The classified step time (of the profiled steps)."""
    error: str | None = None
    """Why the window could not be profiled; the measurement beside it stands."""

    @classmethod
    def of_summary(cls, summary: dict[str, Any] | None) -> ProfileSummary | None:
        """The summary ``autotune.train.window.profile.profile_session`` returns (and writes as
        ``classification.summary``), or its ``{"error": ...}`` when profiling failed."""
        if not summary:
            return None
        cls_ = summary.get("classification") or {}
        return cls(
            profiled_step_ms=summary.get("profiled_step_ms"),
            unprofiled_step_ms=summary.get("unprofiled_step_ms"),
            overhead=summary.get("overhead"),
            buckets=cls_.get("buckets"),
            dominant=cls_.get("dominant"),
            step_time_ms=cls_.get("step_time_ms"),
            error=summary.get("error"),
        )


@dataclass(frozen=True)
class HostLoad:
    """How busy the host was when a run started: read by the tuner just before it started the run's
    processes (:func:`autotune.train.trial.hostload.read_host_load`), so none of the run's own work is in it."""

    others_busy: float
    """Share of the host's CPU time (all cores) that other processes used during the probe, 0..1."""
    load_average: float
    """The 1-minute load average per CPU (1.0: as many runnable processes as CPUs)."""
    cpus: int
    probe_s: float
    """How long the probe sampled the CPU times."""


@dataclass(frozen=True)
class Cost:
    """Where a run's wall time went, seconds: disjoint ``parts`` (``autotune.train.window.cost.PARTS``) that add
    up to ``wall_s``, the rest in ``other`` (the tuner's own work, process exit, what no part timed)."""

    wall_s: float
    parts: dict[str, float]
    """Every part, ``other`` included: ``sum(parts.values()) == wall_s``."""
    compile_cache: dict[str, int] = field(default_factory=dict)
    """Inductor's and AOTAutograd's cache counters in the run (``fxgraph_cache_hit``, ...)."""


@dataclass(frozen=True)
class Failure:
    """Why a run gave no measurement."""

    reason: str
    """A short tag: oom, nan, nccl, compile, config, error, crash, timeout, pruned, budget, ..."""
    error: str
    """One line for a person."""
    traceback: str | None = None
    steps_run: int | None = None
    """Measured steps before the run was stopped (a pruned run)."""
    peak_bytes: int | None = None
    """An out-of-memory run under a memory budget: its peak as the budget counts it (on CUDA, where
    the allocator refused: the peak reached before the refused allocation)."""
    budget_bytes: int | None = None
    """The memory budget it ran under."""
    losses: list[float] | None = None
    """A run over the budget that trained to its end (on a CPU the peak is checked after the
    measured window): every step's loss, the warm-up's included, for loss parity with it."""
    grad_norms: list[float] | None = None


@dataclass(frozen=True)
class TrialRecord:
    """The outcome of one run: a measurement or a failure, and the profile beside them.

    Records are read-only (readers share them): change one with ``dataclasses.replace``.
    """

    measurement: Measurement | None = None
    profile: ProfileSummary | None = None
    failure: Failure | None = None
    host: HostLoad | None = None
    """The host's load when the run started (None in records of studies that predate it)."""
    cost: Cost | None = None
    """Where the run's wall time went (None in records of studies that predate it)."""
    remeasure: TrialRecord | None = None
    """A second run of the same configuration, in fresh processes, where the first one's measurement was
    too noisy to be taken on its word (``autotune.search.noise``)."""
    version: int = VERSION

    def __post_init__(self) -> None:
        assert self.measurement is None or self.failure is None, "a failed run has no measurement"

    @property
    def ok(self) -> bool:
        return self.failure is None

    @classmethod
    def failed(
        cls,
        reason: str,
        error: str,
        *,
        traceback: str | None = None,
        steps_run: int | None = None,
        peak_bytes: int | None = None,
        budget_bytes: int | None = None,
        losses: list[float] | None = None,
        grad_norms: list[float] | None = None,
    ) -> TrialRecord:
        return cls(
            failure=Failure(
                reason, error, traceback, steps_run, peak_bytes, budget_bytes, losses, grad_norms
            )
        )

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "record") -> TrialRecord:
        """The record of ``to_dict``'s data; a bad shape raises ConfigError naming ``where`` and the key."""
        version = data.get("version", VERSION) if isinstance(data, dict) else VERSION
        if isinstance(version, int) and version > VERSION:
            raise ConfigError(
                f"{where}: version {version} is newer than this autotune reads ({VERSION}); upgrade autotune"
            )
        try:
            return from_dict(cls, data, where)
        except TypeError as exc:  # a required field missing
            raise ConfigError(f"{where}: {exc}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, where: str = "record") -> TrialRecord:
        return cls.from_dict(
            loads_attr(text, where, "the JSON object of a trial record, as autotune writes it"),
            where,
        )


def loads_attr(text: Any, where: str, allowed: str) -> Any:
    """The value of the JSON text ``text`` that autotune keeps in a study's attribute ``where``; text
    that does not parse (an edit by hand, bits rotted inside the journal's line) raises ConfigError
    naming ``where``, the value and what is ``allowed``."""
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: nested past the stack
        shown = repr(text if len(str(text)) <= 60 else f"{str(text)[:60]}...")
        raise ConfigError(f"{where}: {shown} is not JSON ({exc}); allowed: {allowed}") from None
