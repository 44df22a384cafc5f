"""Where each training step's time goes: six buckets that add up to the step time.

Command::

    python -m autotune classify PATH [--json] [--hta]

PATH is one trace (``.json`` / ``.json.gz``) or a folder of per-rank traces of one run.

The step window
---------------
Every ``ProfilerStep#N`` host span of every rank is a step. Its window runs from the span's
start to the later of the span's end and the end of the device work the step launched: kernels,
memcpy and memset whose ``correlation`` id matches a runtime call (``cudaLaunchKernel``,
``cudaMemcpyAsync``, ``cudaGraphLaunch``, ...) made during the span, on any host thread. A
``cudaGraphLaunch`` normally shares its correlation id with every kernel of the replayed graph;
device work whose id matches no call goes to the step of the latest graph launch before it
(:mod:`autotune.profiling.attribution` says why and where that rule ends). Windows
of consecutive steps may overlap (step N's device tail runs while step N+1 starts); each step
is classified over its own window, so the per-step buckets add up to each step's time.

Buckets on GPU traces, in priority order (each nanosecond goes to the first that claims it)
-------------------------------------------------------------------------------------------
1. ``compute_serial``: the device runs a compute kernel, a memcpy or a memset on any stream
   (the union of the streams' busy intervals).
2. ``comm_wait``: otherwise, a communication kernel runs (NCCL by kernel name), or a host thread
   is inside a collective call (``gloo:*``, ``c10d::*``, ``record_param_comms``): communication
   not hidden behind compute.
3. ``data_stall``: otherwise (the device is idle), the host waits on the data loader: the
   ``enumerate(DataLoader)#...__next__`` span or an ``autotune.data_wait`` span.
4. ``launch_overhead`` (device side): otherwise, the device sits in a kernel-to-kernel gap no
   longer than ``launch_gap_max_us`` (the per-kernel cost that graphs and fusion remove).
5. ``sync_wait``: otherwise, a host thread is blocked in a synchronising runtime call
   (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``, a copy to or from pageable memory
   under ``.cpu()`` / ``.item()``; :mod:`autotune.profiling.sync`): everything before the call
   was issued, so the idle device is not waiting for launches; removing the sync is the remedy.
6. ``launch_overhead`` (host side): otherwise, a launching host thread is inside an operator or
   another runtime call: the device waits for the host to issue work.
7. ``other``: the rest: long device gaps with the host outside any operator (Python work,
   logging, sleeps, waits on something not traced).

The result names the blocking calls with the most host time (``sync_calls``: the call and the
outermost operator it was made in), so that a ``sync_wait`` says which sync to remove.

What a trace is
---------------
A GPU trace has device activity (kernels, copies, sets). A trace without any is classified as a
CPU-only run only if nothing in it says a GPU was traced: launches, a GPU's own markers
(``gpu_user_annotation``, ``ac2g`` flows) or an NCCL process group make it a GPU trace whose
device side was lost or removed, which is refused. A trace of another accelerator (MTIA, XPU,
HPU, ... activity) is refused, naming it. A CPU-only trace of a machine with GPUs
(``deviceProperties``) is classified with a note saying so.

Buckets on CPU-only traces (the CPU analogues)
----------------------------------------------
Without a device, the "device" is the arithmetic inside operators, and its "launch" is the
framework work around it: Python between operators, the dispatcher, autograd bookkeeping.
Nothing synchronises with a device there: ``sync_wait`` is 0.

1. ``compute_serial``: the innermost operator on some thread is a compute operator (not a view,
   allocation or wrapper; see :data:`kinds.HOST_TABLE`), excluding the first
   ``cpu_dispatch_us`` of each compute operator (the dispatcher's fixed per-call cost, the CPU
   twin of a launch) and excluding operators run inside data-loader spans (making a batch is
   not training compute).
2. ``comm_wait``: otherwise, inside a collective: ``gloo:*`` spans on gloo's threads (the
   transfer and reduction itself) and ``c10d::*`` / ``record_param_comms`` calls.
3. ``data_stall``: otherwise, inside a data-loader span (as on GPU).
4. ``launch_overhead``: otherwise, inside any operator (its dispatch share, views, allocation,
   autograd engine, wrappers), or in a gap between operators no longer than
   ``launch_gap_max_us`` (the Python and dispatcher glue between operators). A model of
   hundreds of tiny operators therefore lands here, as its GPU twin would.
5. ``other``: the rest: long gaps with no operator running (pure-Python work, sleeps).

A CPU-only window recorded with ``detail="spans"`` (no operators) is refused, not classified.

Several ranks: each rank's steps are classified on their own; the aggregate adds the bucket
times of all steps of all ranks. The straggler is the rank with the largest median step time.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from autotune.errors import ConfigError, TraceFormatError, short_repr
from autotune.profiling import intervals as iv
from autotune.profiling.attribution import attribute
from autotune.profiling.kinds import (
    DEVICE_TABLE,
    HOST_TABLE,
    Category,
    HostKind,
    kinds_of,
)
from autotune.profiling.layers import Layers, cpu_layers, gpu_layers, host_ops
from autotune.profiling.result import (
    BUCKETS,
    ClassifyResult,
    KernelStat,
    LaunchStats,
    RankResult,
    StepResult,
    Straggler,
    median,
)
from autotune.profiling.sync import blocking_calls, sync_sites, top_sites
from autotune.profiling.trace import RankTrace, load_traces
from autotune.profiling.traced import check_traced, notes_on

# The time no layer claims (Layers.in_priority_order) goes to this bucket.
REST = "other"
TOP_KERNELS = 10

_STEP_NUMBER = re.compile(r"#(\d+)$")


MAX_THRESHOLD_US = 1e9
"""The largest threshold of :class:`ClassifyOptions`, 1000 s: thresholds become int64 nanoseconds."""


@dataclass(frozen=True)
class ClassifyOptions:
    """Thresholds of the classifier."""

    launch_gap_max_us: float = 500.0
    """Longest idle gap between kernels (host operators on CPU) still counted as launch
    overhead when no host operator is running; longer gaps go to ``other``."""
    cpu_dispatch_us: float = 5.0
    """CPU-only traces: the first microseconds of each compute operator counted as dispatch
    (``launch_overhead``) rather than arithmetic."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not 0 <= value <= MAX_THRESHOLD_US:
                raise ConfigError(
                    f"classify.{name}: {value!r} is out of range; allowed: 0 to {MAX_THRESHOLD_US:g}"
                )


@dataclass
class _Steps:
    number: np.ndarray
    start: np.ndarray
    end: np.ndarray  # host span end; extended by device work for GPU windows
    kernels: np.ndarray


def _find_steps(trace: RankTrace, host_kind: np.ndarray) -> _Steps:
    rows = np.flatnonzero(
        (host_kind == HostKind.STEP)
        & np.isin(trace.host.category, [Category.ANNOTATION, Category.HOST_OP])
    )
    if len(rows) == 0:
        raise TraceFormatError(
            f"{trace.path}: no ProfilerStep#N markers; profile with torch.profiler.schedule and "
            "call prof.step() once per training step"
        )
    numbers = np.array([_step_number(trace, trace.names[i]) for i in trace.host.name[rows]])
    # The same step can be annotated on more than one thread; the first span wins.
    numbers, first = np.unique(numbers, return_index=True)
    rows = rows[first]
    order = np.argsort(trace.host.start[rows])
    rows, numbers = rows[order], numbers[order]
    return _Steps(
        numbers, trace.host.start[rows], trace.host.end[rows].copy(), np.zeros(len(rows), int)
    )


def _step_number(trace: RankTrace, name: str) -> int:
    digits = _STEP_NUMBER.search(name).group(1)
    # past 4300 digits int() raises; past 2**63 the numbers are no step a profiler counted
    if len(digits) > 19 or int(digits) >= 2**63:
        raise TraceFormatError(
            f"{trace.path}: step marker {short_repr(name)} has a step number past 2**63; allowed: "
            "ProfilerStep#N with N below 2**63"
        )
    return int(digits)


def _device_step(trace: RankTrace, host_kind: np.ndarray, steps: _Steps) -> np.ndarray:
    """Index of the step that launched each device event (-1: launched outside every step)."""
    return attribute(trace, host_kind, steps.start, steps.end).step


def device_steps(trace: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """The trace's step numbers (``ProfilerStep#N``, in time order) and, per device event, the
    index into them of the step that launched it (-1: none). Refuses what :func:`classify`
    refuses: no step markers, another accelerator's trace, a GPU trace without its device side."""
    host_kind = kinds_of(HOST_TABLE, trace.names)[trace.host.name]
    check_traced(trace, host_kind)
    steps = _find_steps(trace, host_kind)
    return steps.number, _device_step(trace, host_kind, steps)


def launched_in_steps(trace: RankTrace) -> np.ndarray:
    """Whether each device event of ``trace`` was launched by one of its steps."""
    host_kind = kinds_of(HOST_TABLE, trace.names)[trace.host.name]
    return _device_step(trace, host_kind, _find_steps(trace, host_kind)) >= 0


def _extend_windows(steps: _Steps, dev_end: np.ndarray, dev_step: np.ndarray) -> None:
    mine = dev_step >= 0
    np.maximum.at(steps.end, dev_step[mine], dev_end[mine])
    steps.kernels = np.bincount(dev_step[mine], minlength=len(steps.start))


def _paint_steps(steps: _Steps, layers: Layers) -> list[StepResult]:
    results = []
    named = layers.in_priority_order()
    order = [layer for _, layer in named]
    claims = [bucket for bucket, _ in named] + [REST]  # a bucket may claim at two priorities
    for i in range(len(steps.start)):
        lo, hi = int(steps.start[i]), int(steps.end[i])
        times = iv.paint(order, lo, hi)
        buckets = dict.fromkeys(BUCKETS, 0)
        for bucket, t in zip(claims, times):
            buckets[bucket] += int(t)
        results.append(
            StepResult(
                step=int(steps.number[i]),
                start_ns=lo,
                end_ns=hi,
                buckets_ns=buckets,
                kernels=int(steps.kernels[i]),
            )
        )
    return results


def _window_of(starts: np.ndarray, steps: _Steps) -> np.ndarray:
    """Index of the step window containing each start time, -1 if none."""
    k = np.searchsorted(steps.start, starts, side="right") - 1
    ok = (k >= 0) & (starts < steps.end[np.maximum(k, 0)])
    return np.where(ok, k, -1)


def _gaps_in_steps(busy: iv.Intervals, steps: _Steps) -> np.ndarray:
    s, e = busy
    gs, ge = e[:-1], s[1:]
    k = _window_of(gs, steps)
    inside = (k >= 0) & (ge <= steps.end[np.maximum(k, 0)])
    return (ge - gs)[inside]


@dataclass
class _RankPart:
    result: RankResult
    kernel_ns: dict[str, int]
    kernel_count: dict[str, int]
    gaps_ns: np.ndarray
    sync_sites: dict[tuple, list[int]]


def _name_totals(names: list[str], ids: np.ndarray, ns: np.ndarray) -> tuple[dict, dict]:
    uniq, inverse = np.unique(ids, return_inverse=True)
    total = np.bincount(inverse, weights=ns, minlength=len(uniq))
    count = np.bincount(inverse, minlength=len(uniq))
    return (
        {names[u]: int(t) for u, t in zip(uniq, total)},
        {names[u]: int(c) for u, c in zip(uniq, count)},
    )


def _classify_gpu_rank(
    trace: RankTrace, host_kind, steps: _Steps, opts: ClassifyOptions
) -> _RankPart:
    device_kind = kinds_of(DEVICE_TABLE, trace.names)[trace.device.name]
    dev_step = _device_step(trace, host_kind, steps)
    _extend_windows(steps, trace.device.end, dev_step)
    blocking = blocking_calls(trace, host_kind)
    layers = gpu_layers(
        trace.host,
        host_kind,
        trace.device,
        device_kind,
        round(opts.launch_gap_max_us * 1000),
        blocking,
    )
    mine = dev_step >= 0
    dur = (trace.device.end - trace.device.start)[mine]
    totals, counts = _name_totals(trace.names, trace.device.name[mine], dur)
    result = RankResult(trace.rank, str(trace.path), tuple(_paint_steps(steps, layers)))
    sites = sync_sites(trace, blocking, _window_of(trace.host.start, steps) >= 0)
    return _RankPart(result, totals, counts, _gaps_in_steps(layers.busy, steps), sites)


def _classify_cpu_rank(
    trace: RankTrace, host_kind, steps: _Steps, opts: ClassifyOptions
) -> _RankPart:
    ops = host_ops(trace.host, host_kind)
    layers = cpu_layers(
        trace.host,
        host_kind,
        ops,
        round(opts.launch_gap_max_us * 1000),
        round(opts.cpu_dispatch_us * 1000),
    )
    compute = ops.index[host_kind[ops.index] == HostKind.COMPUTE]
    self_ns = ops.self_ns[host_kind[ops.index] == HostKind.COMPUTE]
    starts = trace.host.start[compute]
    k = _window_of(starts, steps)
    counted = (k >= 0) & ~iv.contains(layers.data, starts)
    steps.kernels = np.bincount(k[counted], minlength=len(steps.start))
    totals, counts = _name_totals(trace.names, trace.host.name[compute][counted], self_ns[counted])
    result = RankResult(trace.rank, str(trace.path), tuple(_paint_steps(steps, layers)))
    return _RankPart(result, totals, counts, _gaps_in_steps(layers.busy, steps), {})


def _classify_rank(trace: RankTrace, opts: ClassifyOptions) -> _RankPart:
    host_kind = kinds_of(HOST_TABLE, trace.names)[trace.host.name]
    check_traced(trace, host_kind)
    steps = _find_steps(trace, host_kind)
    if len(trace.device):
        return _classify_gpu_rank(trace, host_kind, steps, opts)
    _check_recorded_operators(trace)
    return _classify_cpu_rank(trace, host_kind, steps, opts)


def _check_recorded_operators(trace: RankTrace) -> None:
    """A CPU-only trace's buckets come from its operators; a window recorded with
    ``detail="spans"`` has none to split the steps by."""
    if trace.detail == "spans":
        raise TraceFormatError(
            f"{trace.path}: a CPU-only trace recorded with detail='spans' holds no operators to "
            "classify; profile CPU runs with detail='ops' (profile_window's default on CPU)"
        )


def _top_kernels(parts: list[_RankPart]) -> tuple[KernelStat, ...]:
    total: dict[str, int] = defaultdict(int)
    count: dict[str, int] = defaultdict(int)
    for p in parts:
        for name, ns in p.kernel_ns.items():
            total[name] += ns
            count[name] += p.kernel_count[name]
    whole = sum(total.values())
    ranked = sorted(total, key=lambda n: (-total[n], n))[:TOP_KERNELS]
    return tuple(
        KernelStat(n, total[n], count[n], total[n] / whole if whole else 0.0) for n in ranked
    )


def _straggler(ranks: list[RankResult]) -> Straggler | None:
    if len(ranks) < 2:
        return None
    slow = max(ranks, key=lambda r: r.step_time_ms)
    others = median(r.step_time_ms for r in ranks if r is not slow)
    return Straggler(slow.rank, slow.step_time_ms, others)


def classify(
    source: str | Path | list[RankTrace], options: ClassifyOptions | None = None
) -> ClassifyResult:
    """Classify every step of every rank of ``source`` (a trace file, a folder, or loaded traces)."""
    opts = options or ClassifyOptions()
    traces = load_traces(source) if isinstance(source, (str, Path)) else source
    parts = [_classify_rank(t, opts) for t in traces]
    gaps = np.concatenate([p.gaps_ns for p in parts])
    kernels = [s.kernels for p in parts for s in p.result.steps]
    assert all(set(s.buckets_ns) == set(BUCKETS) for p in parts for s in p.result.steps)
    return ClassifyResult(
        device="gpu" if any(len(t.device) for t in traces) else "cpu",
        ranks=tuple(p.result for p in parts),
        top_kernels=_top_kernels(parts),
        launch=LaunchStats(
            kernels_per_step=float(median(kernels)),
            median_launch_gap_us=float(np.median(gaps)) / 1000 if len(gaps) else 0.0,
        ),
        straggler=_straggler([p.result for p in parts]),
        options=asdict(opts),
        sync_calls=top_sites([p.sync_sites for p in parts]),
        notes=notes_on(traces),
    )
