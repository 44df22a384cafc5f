"""What a trace is a trace of: a GPU run, a CPU-only run, or something the classifier refuses.

A trace without device activity reads as a CPU-only run, so before it is classified as one,
everything else in it that says a GPU was traced is looked at: launches (the host side of
kernels, copies and sets put on a stream), a GPU's own markers (``gpu_user_annotation``,
``ac2g`` flow events) and an NCCL process group. Any of them makes it a GPU trace whose device
side was lost by the profiler (CUPTI) or removed from the file: refused, not misread. Other
runtime calls alone (``cudaGetDevice``, a ``cudaDeviceSynchronize`` with nothing to wait for)
are what a CPU run on a GPU machine records: classified, with a note. A trace with another
accelerator's activity (categories ``mtia_*``, ``xpu_*``, ``hpu_*``, ``privateuse1_*``) is refused
naming that accelerator: its device work is in categories this classifier does not read. So is
a trace of CUPTI's range profiler (``cuda_profiler_range`` events: hardware counters per kernel,
each kernel replayed on its own), whose times are not those of a training step.
"""

from __future__ import annotations

import numpy as np

from autotune.errors import TraceFormatError
from autotune.profiling.kinds import CATEGORY_TABLE, Category, HostKind, first_match
from autotune.profiling.trace import RankTrace

ACCELERATORS = {"mtia": "MTIA", "xpu": "Intel XPU", "hpu": "Intel Gaudi (HPU)",
                "privateuse1": "PrivateUse1-backend", "glow": "Glow"}  # fmt: skip
"""Name of the accelerator of each category prefix of :data:`Category.ACCELERATOR`."""


def _of_category(trace: RankTrace, category: Category) -> dict[str, int]:
    return {
        c: n for c, n in trace.side_categories.items() if first_match(CATEGORY_TABLE, c) == category
    }


def _describe(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {c}" for c, n in sorted(counts.items()))


def check_traced(trace: RankTrace, host_kind: np.ndarray) -> None:
    """Raise :class:`TraceFormatError` for a trace that is not of a CUDA/ROCm GPU or a CPU."""
    foreign = _of_category(trace, Category.ACCELERATOR)
    if foreign:
        names = sorted({ACCELERATORS.get(c.split("_")[0], c) for c in foreign})
        raise TraceFormatError(
            f"{trace.path}: a trace of {' and '.join(names)} accelerator activity ({_describe(foreign)} "
            "events), whose device work autotune cannot read; it classifies CUDA or ROCm GPU traces "
            "and CPU-only traces"
        )
    ranges = trace.side_categories.get("cuda_profiler_range", 0)
    if ranges:
        raise TraceFormatError(
            f"{trace.path}: a trace of CUPTI's range profiler ({ranges} cuda_profiler_range events: counters "
            "per kernel, each replayed alone), not a timeline of the steps; profile without "
            "experimental_config's profiler_metrics"
        )
    if len(trace.device):
        return
    runtime = trace.host.category == Category.RUNTIME
    launches = runtime & np.isin(host_kind, [HostKind.LAUNCH, HostKind.GRAPH_LAUNCH])
    lost = "the profiler recorded no GPU events (CUPTI): profile again, in a fresh process"
    if launches.any():
        raise TraceFormatError(
            f"{trace.path}: {int(launches.sum())} kernel launches but no device activity; {lost}"
        )
    markers = _of_category(trace, Category.GPU_SIDE)
    if markers or "nccl" in (trace.backend or ""):
        why = f"{_describe(markers)} events" if markers else f"a process group on {trace.backend!r}"
        raise TraceFormatError(
            f"{trace.path}: a GPU trace without its device events (it has {why} but no kernel, copy "
            "or runtime call): they were removed from the file or lost; classify the trace as "
            "torch.profiler wrote it, with ProfilerActivity.CUDA"
        )


def notes_on(traces: list[RankTrace]) -> tuple[str, ...]:
    """One line per thing a reader of a result should know about what was traced."""
    if any(len(t.device) for t in traces):
        return ()
    gpus = max((t.device_properties for t in traces), default=0)
    calls = sum(int((t.host.category == Category.RUNTIME).sum()) for t in traces)
    if gpus == 0 and calls == 0:
        return ()
    seen = (
        f"saw {gpus} GPU(s) on the machine (deviceProperties)"
        if gpus
        else f"recorded {calls} CUDA runtime calls"
    )
    return (
        f"the profiler {seen} but traced no GPU activity: classified as a CPU-only run (profile "
        "with ProfilerActivity.CUDA for GPU work)",
    )
