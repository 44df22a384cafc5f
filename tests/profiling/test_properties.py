"""Properties over random event layouts: the buckets of every step add up to the step time."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.profiling import BUCKETS, ClassifyOptions, classify
from autotune.profiling.synth import TraceBuilder
from autotune.profiling.trace import RankTrace, load_trace

KERNELS = (
    "gemm_kernel",
    "ncclDevKernel_AllReduce",
    "Memcpy HtoD (Pinned -> Device)",
    "Memcpy DtoH (Device -> Pageable)",
)
HOST_NAMES = (
    "aten::mm",
    "aten::view",
    "c10d::allreduce_",
    "autograd::engine::evaluate_function: X",
)
ANNOTATIONS = (
    "autotune.data_wait",
    "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
)

# Times are drawn in nanoseconds and written as microseconds with three decimals, like Kineto.
ns = st.integers(min_value=0, max_value=400_000)


def us(x: int) -> float:
    return x / 1000


@st.composite
def gpu_layouts(draw):
    b = TraceBuilder()
    t = 0
    expected = []
    for n in range(draw(st.integers(1, 3))):
        length = draw(st.integers(1_000, 300_000))
        b.step(n, us(t), us(length))
        device_end = t + length
        kernels = 0
        for _ in range(draw(st.integers(0, 6))):
            host = t + draw(st.integers(0, length - 1))
            call = draw(st.integers(1, 5_000))
            start = host + draw(ns)
            dur = draw(st.integers(0, 200_000))
            name = draw(st.sampled_from(KERNELS))
            cat = "gpu_memcpy" if name.startswith("Memcpy") else "kernel"
            b.launch(
                name,
                us(host),
                us(call),
                us(start),
                us(dur),
                stream=draw(st.sampled_from([7, 8, 20])),
                cat=cat,
            )
            # A launch that starts inside the host span belongs to the step.
            device_end = max(device_end, start + dur)
            kernels += 1
        if draw(st.booleans()):
            host = t + draw(st.integers(0, length - 1))
            replay = [
                (f"k{j}", us(host + draw(ns)), us(draw(st.integers(0, 50_000))), 7 + j % 2)
                for j in range(draw(st.integers(1, 40)))
            ]
            b.graph_launch(us(host), us(draw(st.integers(1, 5_000))), replay)
            device_end = max(device_end, *(round(k[1] * 1000) + round(k[2] * 1000) for k in replay))
            kernels += len(replay)
        for _ in range(draw(st.integers(0, 6))):
            name = draw(st.sampled_from(HOST_NAMES + ANNOTATIONS))
            (b.annotation if name in ANNOTATIONS else b.op)(
                name, us(t + draw(ns)), us(draw(ns)), tid=draw(st.sampled_from([None, 99]))
            )
        expected.append((t, device_end, kernels))
        t += length + draw(st.integers(0, 600_000))
    return b, expected


@st.composite
def op_tree(draw, start, end, depth=0):
    """Properly nested operators inside [start, end)."""
    ops = []
    t = start
    while depth < 4 and t < end and draw(st.booleans()):
        a = draw(st.integers(t, end))
        z = draw(st.integers(a, end))
        ops.append(
            (
                draw(st.sampled_from(("aten::addmm", "aten::view", "aten::add", "aten::linear"))),
                a,
                z,
            )
        )
        ops += draw(op_tree(a, z, depth + 1))
        t = z
    return ops


@st.composite
def cpu_layouts(draw):
    b = TraceBuilder()
    t = 0
    expected = []
    for n in range(draw(st.integers(1, 3))):
        length = draw(st.integers(1_000, 300_000))
        b.step(n, us(t), us(length))
        for tid in (None, 55):
            for name, a, z in draw(op_tree(t, t + length)):
                b.op(name, us(a), us(z - a), tid=tid)
        for _ in range(draw(st.integers(0, 3))):
            name = draw(st.sampled_from(("gloo:all_reduce", *ANNOTATIONS)))
            b.annotation(
                name, us(t + draw(ns)), us(draw(ns)), tid=draw(st.sampled_from([None, 77]))
            )
        expected.append((t, t + length, None))
        t += length + draw(st.integers(0, 600_000))
    return b, expected


def _check(trace: RankTrace, expected, options: ClassifyOptions | None = None):
    steps = classify([trace], options).ranks[0].steps
    assert len(steps) == len(expected)
    for s, (start, end, kernels) in zip(steps, expected):
        assert set(s.buckets_ns) == set(BUCKETS)
        assert all(v >= 0 for v in s.buckets_ns.values())
        assert sum(s.buckets_ns.values()) == s.time_ns
        assert s.start_ns - trace.host.start.min() == start - expected[0][0]
        assert s.time_ns == end - start
        if kernels is not None and len(trace.device):  # no kernel drawn: a CPU-only trace
            assert s.kernels == kernels
    return steps


def _write(builder: TraceBuilder, tmp_path_factory, shuffle_seed=None) -> RankTrace:
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(builder.events)
    return load_trace(builder.write(tmp_path_factory.mktemp("t") / "rank0.json"))


@given(gpu_layouts(), st.integers(0, 2**32))
@settings(max_examples=60, deadline=None)
def test_gpu_buckets_add_up_and_ignore_event_order(tmp_path_factory, layout, seed):
    builder, expected = layout
    first = _check(_write(builder, tmp_path_factory), expected)
    again = _check(_write(builder, tmp_path_factory, shuffle_seed=seed), expected)
    assert [s.buckets_ns for s in first] == [s.buckets_ns for s in again]


@given(cpu_layouts(), st.floats(0, 50), st.floats(0, 2000))
@settings(max_examples=60, deadline=None)
def test_cpu_buckets_add_up(tmp_path_factory, layout, dispatch, gap):
    builder, expected = layout
    _check(
        _write(builder, tmp_path_factory),
        expected,
        ClassifyOptions(launch_gap_max_us=gap, cpu_dispatch_us=dispatch),
    )
