"""A host blocked in a synchronising call is sync_wait, not launch overhead; kernels launched
before the trace are nobody's."""

from __future__ import annotations

import numpy as np

from autotune.profiling import classify, load_trace
from autotune.profiling.attribution import attribute
from autotune.profiling.kinds import HOST_TABLE, HostKind, kinds_of
from autotune.profiling.synth import TraceBuilder
from tests.profiling.make_fixtures import GEMM

D2H = "Memcpy DtoH (Device -> Pageable)"


def _blocked_copy(tmp_path, copy_name=D2H):
    """A 200 us GEMM, then ``loss.item()``-like: aten::to's cudaMemcpyAsync [42, 950) waits while the
    device sits idle [225, 940) on something the trace does not hold, then copies [940, 945)."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.op("aten::mm", 10, 20)
    b.launch(GEMM, 12, 8, 25, 200)
    b.op("aten::to", 40, 920)
    b.op("aten::copy_", 41, 918)
    b.launch(copy_name, 42, 908, 940, 5, api="cudaMemcpyAsync", cat="gpu_memcpy")
    return b.write(tmp_path / "rank0.pt.trace.json.gz")


def test_a_host_blocked_in_a_pageable_copy_is_sync_wait(tmp_path):
    got = classify(_blocked_copy(tmp_path))
    [step] = got.ranks[0].steps
    # compute [25, 225) + [940, 945); sync [225, 940) + [945, 950); launch [10, 25) (mm before its
    # kernel) + [950, 960) (aten::to after the copy); other [0, 10) + [960, 1000).
    assert step.buckets_ns == {
        "compute_serial": 205_000,
        "comm_wait": 0,
        "launch_overhead": 25_000,
        "sync_wait": 720_000,
        "data_stall": 0,
        "other": 50_000,
    }
    assert got.dominant == "sync_wait"
    [site] = got.sync_calls
    assert (site.call, site.under, site.total_ns, site.count) == (
        "cudaMemcpyAsync",
        "aten::to",
        908_000,
        1,
    )
    assert got.to_dict()["sync_calls"] == [
        {"call": "cudaMemcpyAsync", "under": "aten::to", "total_ms": 0.908, "count": 1}
    ]


def test_the_same_copy_into_pinned_memory_does_not_block(tmp_path):
    """A pinned copy returns at once: the host in its call is launching, not waiting."""
    got = classify(_blocked_copy(tmp_path, "Memcpy DtoH (Device -> Pinned)"))
    [step] = got.ranks[0].steps
    assert step.buckets_ns["sync_wait"] == 0
    assert step.buckets_ns["launch_overhead"] == 25_000 + 720_000
    assert got.dominant == "launch_overhead" and got.sync_calls == ()


def test_a_device_synchronize_with_short_kernel_gaps_stays_launch_overhead(tmp_path):
    """While the host waits in cudaDeviceSynchronize, gaps of 2 us between queued kernels are the
    per-kernel cost (launch_overhead); the long idle stretch before the last kernel is sync_wait."""
    b = TraceBuilder()
    b.step(1, 0, 2000)
    b.op("aten::add", 5, 100)
    for i in range(10):
        b.launch(
            "add_kernel", 10 + 5 * i, 4, 100 + 12 * i, 10
        )  # [100, 218): 10 kernels, 2 us apart
    b.launch("tail_kernel", 90, 4, 1218, 10)  # waits on something untraced: 1000 us idle before it
    b.runtime("cudaDeviceSynchronize", 106, 1114)
    got = classify(b.write(tmp_path / "rank0.pt.trace.json.gz"))
    [step] = got.ranks[0].steps
    # [0, 5) other; [5, 100) aten::add before the first kernel: launch; [100, 218) kernels and
    # 9 gaps of 2 us (launch); [218, 1218) idle inside the sync; [1218, 1228) the tail; then other.
    assert step.buckets_ns == {
        "compute_serial": 110_000,
        "comm_wait": 0,
        "launch_overhead": 95_000 + 18_000,
        "sync_wait": 1_000_000,
        "data_stall": 0,
        "other": 5_000 + 772_000,
    }
    assert [(s.call, s.under) for s in got.sync_calls] == [("cudaDeviceSynchronize", None)]


def test_kernels_launched_before_the_trace_are_not_the_first_graph_replays(tmp_path):
    """The device still runs the unprofiled step's kernels (correlation ids below every call of
    the trace) after step 1's cudaGraphLaunch: they are nobody's, not step 1's."""
    b = TraceBuilder()
    b._corr = 500
    for n, t in ((1, 0), (2, 1000)):
        b.step(n, t, 400)
        b.graph_launch(t + 5, 5, [(f"k{j}", t + 60 + 2 * j, 1.5, 7) for j in range(20)], "none")
    for i in range(3):
        b.device_event("earlier_step_kernel", 11 + 15 * i, 12, 400 + i, stream=7)
    path = b.write(tmp_path / "rank0.pt.trace.json.gz")
    trace = load_trace(path)
    host_kind = kinds_of(HOST_TABLE, trace.names)[trace.host.name]
    steps = np.flatnonzero(host_kind == HostKind.STEP)
    att = attribute(trace, host_kind, trace.host.start[steps], trace.host.end[steps])
    earlier = np.array([trace.names[i] == "earlier_step_kernel" for i in trace.device.name])
    assert (att.step[earlier] == -1).all() and not att.via_graph_launch[earlier].any()
    assert (att.step[~earlier] >= 0).all()
    assert [s.kernels for s in classify(path).ranks[0].steps] == [20, 20]
