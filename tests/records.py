"""Records for tests that build trials by hand: a measured run, its profile, a failure."""

from __future__ import annotations

from autotune.train.trial.record import (
    LoaderRate,
    Measurement,
    Memory,
    ProfileSummary,
    StepTimes,
    TrialRecord,
)


def measurement(
    samples_per_s: float = 10.0,
    *,
    peak: int = 2**30,
    window: float | None = None,
    bound: bool = False,
    losses: list[float] | None = None,
    **over,
) -> Measurement:
    """A measured window of ``samples_per_s`` (batch 2, one process) whose steps took 2 / rate s."""
    ms = 2e3 / samples_per_s
    fields = dict(
        samples_per_s=samples_per_s,
        step_time=StepTimes(
            median_ms=ms,
            p10_ms=0.9 * ms,
            p90_ms=1.1 * ms,
            min_ms=0.8 * ms,
            max_ms=1.2 * ms,
            mean_ms=ms,
        ),
        memory=Memory(allocated_bytes=peak, reserved_bytes=peak),
        loader=LoaderRate(window_samples_per_s=window or samples_per_s, bound=bound),
        mfu=0.1,
        world_size=1,
        losses=losses or [1.0, 0.9],
        grad_norms=[2.0, 1.9],
        environment={"device": "cpu"},
        batch_size=2,
        steps=2,
        warmup_steps=0,
    )
    return Measurement(**{**fields, **over})


def measured(
    samples_per_s: float = 10.0, *, buckets: dict[str, float] | None = None, **over
) -> TrialRecord:
    """The record of a measured run, profiled when ``buckets`` are given."""
    profile = (
        ProfileSummary(buckets=buckets, dominant=max(buckets, key=buckets.get)) if buckets else None
    )
    return TrialRecord(measurement=measurement(samples_per_s, **over), profile=profile)
