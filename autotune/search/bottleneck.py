"""Which bottleneck the guide acts on: the knob groups that address each time bucket of a profile,
and the buckets of a trial worth a stage (:func:`ranked_buckets`)."""

from __future__ import annotations

from optuna.trial import FrozenTrial

from autotune.search.trials import measurement_of, profile_of

BUCKET_GROUPS: dict[str, tuple[str, ...]] = {
    "data_stall": ("data",),
    "launch_overhead": ("graphs", "optimizer", "compile"),
    # CUDA_DEVICE_MAX_CONNECTIONS (kernels) decides how many streams run beside the all-reduce
    "comm_wait": ("ddp", "kernels"),
    # a fused optimizer moves the optimizer state once instead of once per multi-tensor chunk. Compile
    # is searched after precision: tried before it, on the CPU benchmark its stage (checkpointing
    # there) cost 2 trials to 90 % of the best; on a GPU its remedy (the whole model: 87 ms a step
    # inside a whole-step graph on an H200, 110 ms without) is tried among the remedies anyway
    # model: the same loss computed with less work (dead outputs skipped, the projectors' weights read in
    # place); exact, so tried before the groups that trade precision or compile time for speed
    # kernels (the attention backend) after compile; memory last: checkpointing trades compute
    # for memory, which pays only where memory binds
    "compute_serial": ("model", "optimizer", "precision", "compile", "kernels", "memory"),
    # the host blocked in a synchronising call (.item(), .cpu(), a pageable copy): its remedy is to
    # remove the sync from the training code, which no knob does; graphs cannot capture a sync at all
    "sync_wait": (),
    "other": (),
}
"""Knob groups that address each bucket, in the order they are tried."""

MIN_SHARE = 0.05
"""A bucket below this share of the step is not worth a stage."""

LOADER_HEADROOM = 0.5
"""A loader that sustains less than this share of the samples/s the step's FLOPs allow at the
measured matmul rate binds as soon as the compute remedies land (:func:`loader_short`)."""


def buckets_of(trial: FrozenTrial) -> dict[str, float] | None:
    """The time buckets of the trial's profiled window (None: it was not profiled)."""
    profile = profile_of(trial)
    return profile.buckets if profile is not None else None


def loader_stall(trial: FrozenTrial) -> float:
    """The part of a loader-bound trial's step spent waiting on its loader: 1 - measured rate / its
    steps' rate (0 when the loader kept up).

    The profiled steps come after the measured window, when the loader has often filled its
    prefetch queue again: on an H200 a medium-preset trial whose loader held it to 264 samples/s
    against 657 for its steps (a 60 % stall) showed a data bucket of 3 %.
    """
    measured = measurement_of(trial)
    if (
        measured is None
        or not measured.loader.bound
        or not measured.loader.window_samples_per_s
        or trial.value is None
    ):
        return 0.0
    return max(0.0, 1.0 - float(trial.value) / measured.loader.window_samples_per_s)


def loader_short(trial: FrozenTrial) -> tuple[float, float] | None:
    """(what the trial's loader workers sustain, the step's compute ceiling), both samples/s, where the
    loader is under ``LOADER_HEADROOM`` of the ceiling; None otherwise or where either is unknown.

    The ceiling is the processes' measured matmul rate over the model's FLOPs a sample. A slow
    incumbent hides its loader: under a 24 GiB budget the 8-bit fit ran at 35 samples/s beside a
    loader sustaining 56, so its profile showed no data stall, and the compute remedies that made its
    steps 169 samples/s left it loader-bound at 60. Such a loader's remedies join the compute ones.
    """
    m = measurement_of(trial)
    if m is None or not (m.loader.loader_samples_per_s and m.matmul_tflops and m.flops_per_sample):
        return None
    ceiling = m.world_size * m.matmul_tflops * 1e12 / m.flops_per_sample
    rate = float(m.loader.loader_samples_per_s)
    return (rate, ceiling) if rate < LOADER_HEADROOM * ceiling else None


def ranked_buckets(trial: FrozenTrial) -> list[tuple[str, float]]:
    """The trial's buckets worth acting on (at least ``MIN_SHARE``), largest first.

    A loader-bound trial ranks ``data_stall`` first whatever its profile says: its measured rate is
    its loader's, so no other knob can raise it (on two H200s the four remedies tried before the
    loader's ran at 85-98 samples/s against stock's 105 and were pruned). Its share is then the larger of the profile's and
    :func:`loader_stall`.
    """
    buckets = dict(buckets_of(trial) or {})
    stall = loader_stall(trial)
    if stall >= MIN_SHARE:
        buckets["data_stall"] = max(stall, buckets.get("data_stall", 0.0))
    ranked = sorted(((b, v) for b, v in buckets.items() if v >= MIN_SHARE), key=lambda kv: -kv[1])
    if stall >= MIN_SHARE:
        ranked.sort(key=lambda kv: kv[0] != "data_stall")  # stable: the others keep their order
    return ranked
