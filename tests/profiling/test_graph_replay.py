"""CUDA-graph replays in every correlation shape a trace may show: each kernel counted once.

The fixtures under data/graph_shapes/ are gpu_graph.json.gz with the graph's kernels correlated
differently (tests/profiling/make_fixtures.py, ``GRAPH_SHAPES``); the answer must not change.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune.errors import TraceFormatError
from autotune.profiling import classify, load_trace
from autotune.profiling.attribution import attribute
from autotune.profiling.classify import launched_in_steps
from autotune.profiling.kinds import HOST_TABLE, HostKind, kinds_of
from autotune.profiling.synth import TraceBuilder
from tests.profiling.census import GraphKernelsNotTraced, census, check_graph_replays
from tests.profiling.make_fixtures import GRAPH_SHAPES, NCCL

DATA = Path(__file__).parent / "data"


def _steps(result):
    return [
        (s.step, s.start_ns, s.end_ns, s.kernels, s.buckets_ns)
        for r in result.ranks
        for s in r.steps
    ]


@pytest.mark.parametrize("shape", GRAPH_SHAPES)
def test_every_shape_gives_the_answer_of_the_correlated_trace(shape):
    want = classify(DATA / "gpu_graph.json.gz")
    got = classify(DATA / "graph_shapes" / f"{shape}.json.gz")
    assert _steps(got) == _steps(want)
    assert [s.kernels for s in got.ranks[0].steps] == [51, 51]
    assert got.launch == want.launch
    assert got.top_kernels == want.top_kernels


@pytest.mark.parametrize("shape", GRAPH_SHAPES)
def test_attribution_says_how_each_kernel_was_found(shape):
    trace = load_trace(DATA / "graph_shapes" / f"{shape}.json.gz")
    host_kind = kinds_of(HOST_TABLE, trace.names)[trace.host.name]
    steps = np.flatnonzero(host_kind == HostKind.STEP)
    att = attribute(trace, host_kind, trace.host.start[steps], trace.host.end[steps])
    graph = np.array([trace.names[i].startswith("graph_kernel") for i in trace.device.name])
    assert (att.step >= 0).all()
    assert not att.via_graph_launch[~graph].any()  # the NCCL kernels keep their correlation
    expected_via = {"none": 100, "zero": 100, "foreign": 100, "first": 96}[shape]
    assert att.via_graph_launch.sum() == expected_via
    assert launched_in_steps(trace).all()


def test_launch_names_of_runtime_and_driver():
    names = [
        "cudaGraphLaunch",
        "cudaGraphLaunch_v10000",
        "cuGraphLaunch",
        "cuGraphLaunch_ptsz",
        "hipGraphLaunch",
        "cudaLaunchKernel",
        "cuLaunchKernelEx",
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
        "CUDAGraph::replay",
        "cudaGraphInstantiate",
        "aten::fill_",
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize_v3020",
        "cuEventSynchronize",
        "hipDeviceSynchronize",
        "cudaMemcpy",
        "hipMemcpyWithStream",
        "cuMemcpyDtoH_v2",
    ]
    kinds = [HostKind(k) for k in kinds_of(HOST_TABLE, names)]
    assert (
        kinds
        == [HostKind.GRAPH_LAUNCH] * 5
        + [HostKind.LAUNCH] * 4
        + [HostKind.COMPUTE] * 3
        + [HostKind.SYNC] * 7
    )


def _replays(tmp_path: Path, **kw) -> Path:
    """Two steps replaying 20 uncorrelated kernels each, with the extras ``kw`` asks for."""
    b = TraceBuilder()
    for n, t in ((1, 0), (2, 1000)):
        b.step(n, t, 40)
        b.graph_launch(t + 5, 5, [(f"k{j}", t + 12 + 2 * j, 1.5, 7) for j in range(20)], "none")
    if kw.get("stray_at") is not None:
        b.device_event("stray_kernel", kw["stray_at"], 2, None)
    if kw.get("eager_step"):
        b.step(3, 2000, 40)
        b.op("aten::add", 2005, 5)
        b.launch("eager_add", 2006, 2, 2010, 3)
    return b.write(tmp_path / "trace.json.gz")


def test_uncorrelated_kernels_follow_the_latest_graph_launch(tmp_path):
    got = classify(_replays(tmp_path))
    assert [s.kernels for s in got.ranks[0].steps] == [20, 20]
    # Each window reaches the end of its last kernel: 12 + 2 * 19 + 1.5 = 51.5 us.
    assert [s.time_ns for s in got.ranks[0].steps] == [51_500, 51_500]


def test_a_late_stray_kernel_is_left_out(tmp_path):
    """Two steps after the last graph launch, an uncorrelated kernel belongs to no replay."""
    got = classify(_replays(tmp_path, stray_at=3500, eager_step=True))
    assert [s.kernels for s in got.ranks[0].steps] == [20, 20, 1]
    assert got.ranks[0].steps[1].end_ns - got.ranks[0].steps[1].start_ns == 51_500


def test_a_stray_kernel_within_the_run_ahead_goes_to_the_graph_step(tmp_path):
    """Within one step of run-ahead, an uncorrelated kernel after a replay is that replay's."""
    got = classify(_replays(tmp_path, stray_at=1500, eager_step=True))
    assert [s.kernels for s in got.ranks[0].steps] == [20, 21, 1]
    assert got.ranks[0].steps[1].time_ns == 502_000


def test_uncorrelated_kernels_without_graph_launches_stay_unattributed(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 40)
    b.launch("eager", 5, 2, 10, 3)
    b.device_event("orphan", 20, 50, None)
    got = classify(b.write(tmp_path / "t.json.gz"))
    assert got.ranks[0].steps[0].kernels == 1
    assert got.ranks[0].steps[0].time_ns == 40_000


def test_a_replay_whose_kernels_were_not_traced(tmp_path):
    """CUPTI may record the launch but no kernel: the step is its host span and its NCCL kernel."""
    b = TraceBuilder()
    b.step(1, 0, 50)
    b.graph_launch(8, 6, [])
    b.launch(NCCL, 16.5, 1, 20, 30, stream=9)
    got = classify(b.write(tmp_path / "t.json.gz"))
    step = got.ranks[0].steps[0]
    assert (step.kernels, step.time_ns) == (1, 50_000)
    assert step.buckets_ns["compute_serial"] == 0 and step.buckets_ns["comm_wait"] == 30_000


def _gpu_test_trace(folder: Path, correlation: str, kernels: int = 400) -> Path:
    """What test_gpu.py's graph program writes: per step two fill kernels, then one replay of
    ``kernels`` tiny kernels, and the host waiting in cudaDeviceSynchronize until they are done."""
    b = TraceBuilder()
    for n, t in ((3, 0), (4, 2000), (5, 4000)):
        b.step(n, t, 825)
        for i in range(2):
            b.op("aten::fill_", t + 2 + 5 * i, 4)
            b.launch("fill_kernel", t + 3 + 5 * i, 2, t + 10 + 2 * i, 1)
        replay = [(f"elementwise_{j % 2}", t + 20 + 2 * j, 1.5, 7 + j % 3) for j in range(kernels)]
        b.graph_launch(t + 15, 5, replay, correlation)
        b.runtime("cudaDeviceSynchronize", t + 21, 799)
    return b.write(folder / "rank0.pt.trace.json.gz")


@pytest.mark.parametrize("shape", ("launch", *GRAPH_SHAPES))
def test_the_gpu_test_check_passes_on_every_shape(tmp_path, shape):
    _gpu_test_trace(tmp_path, shape)
    facts = check_graph_replays(tmp_path, want=400)
    steps = census(tmp_path / "rank0.pt.trace.json.gz")["steps"]
    assert [(s["device_events"], s["graph_kernels"], s["graph_launches"]) for s in steps] == [
        (402, 400, 1)
    ] * 3
    relation = {
        "launch": "graph_launch",
        "none": "no_correlation",
        "zero": "unmatched",
        "foreign": "unmatched",
    }.get(shape)
    if relation:
        assert steps[0]["correlation"] == {relation: 400, "other_call": 2}
    else:
        assert steps[0]["correlation"] == {
            "graph_launch": 3,
            "no_correlation": 397,
            "other_call": 2,
        }
    assert '"graph_launches": 3' in facts and "CUDA" in facts


def test_the_gpu_test_check_tells_what_is_missing(tmp_path):
    _gpu_test_trace(tmp_path / "none", "foreign", kernels=0)
    with pytest.raises(
        GraphKernelsNotTraced, match=r"traced none of the replayed graph's kernels; .*census"
    ):
        check_graph_replays(tmp_path / "none", want=400)
    _gpu_test_trace(tmp_path / "some", "launch", kernels=300)
    with pytest.raises(
        AssertionError, match=r"holds \[300, 300, 300\] graph kernels per step, not 400; .*census"
    ):
        check_graph_replays(tmp_path / "some", want=400)


def test_a_gpu_trace_without_device_events_is_an_error(tmp_path):
    """Launches but no kernel at all: CUPTI lost the device side; no CPU-only reading of it."""
    b = TraceBuilder()
    b.step(1, 0, 50)
    b.op("aten::add", 2, 10)
    b.runtime("cudaLaunchKernel", 4, 3)
    b.graph_launch(20, 5, [])
    path = b.write(tmp_path / "rank0.pt.trace.json.gz")
    with pytest.raises(
        TraceFormatError,
        match=r"rank0\.pt\.trace\.json\.gz: 2 kernel launches but no device activity",
    ):
        classify(path)


def test_the_gpu_test_check_on_a_trace_without_cuda_activity(tmp_path):
    b = TraceBuilder()
    for n in (3, 4):
        b.step(n, 1000 * n, 500)
        b.op("CUDAGraph::replay", 1000 * n + 5, 400)
    b.write(tmp_path / "rank0.pt.trace.json.gz")
    with pytest.raises(GraphKernelsNotTraced, match=r"recorded no CUDA activity at all; .*census"):
        check_graph_replays(tmp_path, want=400)


def _h200_replay_trace(folder: Path, kernel_us: float, spacing_us: float) -> Path:
    """The shape of test_gpu.py's graph replays on the H200 (torch 2.11, CUDA 13.0): no operator,
    one cudaGraphLaunch per step (1 ms on the host), 400 kernels on stream 7 that all carry the
    launch's correlation id, the first 100 µs after the call begins, then cudaDeviceSynchronize."""
    b = TraceBuilder()
    for n, t in ((3, 0), (4, 10_000), (5, 20_000)):
        replay = [
            (f"elementwise_{j % 2}", t + 150 + spacing_us * j, kernel_us, 7) for j in range(400)
        ]
        b.graph_launch(t + 50, 1000, replay, "launch")
        end = replay[-1][1] + kernel_us
        b.runtime("cudaDeviceSynchronize", t + 1050, end - (t + 1050))
        b.step(n, t, end - t + 150)
    return b.write(folder / "rank0.pt.trace.json.gz")


def test_tiny_graph_kernels_paced_by_the_launch_are_launch_overhead(tmp_path):
    """1 µs kernels every 2.5 µs: the device idles between nodes while the host is still in
    cudaGraphLaunch (then in the synchronise), which is launch overhead; every kernel is counted."""
    _h200_replay_trace(tmp_path, kernel_us=1.0, spacing_us=2.5)
    got = classify(tmp_path)
    assert [s.kernels for s in got.ranks[0].steps] == [400] * 3
    for s in got.ranks[0].steps:
        # [0, 50) Python, [50, 1148.5) launch and kernels, [1148.5, 1298.5) after the sync.
        assert s.buckets_ns == {
            "compute_serial": 400_000,
            "comm_wait": 0,
            "data_stall": 0,
            "launch_overhead": 698_500,
            "sync_wait": 0,
            "other": 200_000,
        }
    assert got.dominant == "launch_overhead"
    with pytest.raises(
        AssertionError,
        match=r"buckets \{'compute_serial': 0.30.*'launch_overhead': 0.53.*median_gap_us",
    ):
        check_graph_replays(tmp_path, want=400)


def test_long_graph_kernels_run_back_to_back_are_compute(tmp_path):
    """What the fixed GPU test replays: 14 µs kernels 0.4 µs apart; the device paces the replay."""
    _h200_replay_trace(tmp_path, kernel_us=14.0, spacing_us=14.4)
    got = classify(tmp_path)
    assert [s.kernels for s in got.ranks[0].steps] == [400] * 3
    for s in got.ranks[0].steps:
        # The 100 µs before the first kernel and 399 gaps of 0.4 µs are launch overhead.
        assert s.buckets_ns["compute_serial"] == 5_600_000
        assert s.buckets_ns["launch_overhead"] == 100_000 + 399 * 400
        assert s.buckets_ns["other"] == 200_000
    facts = check_graph_replays(tmp_path, want=400)
    assert '"device_busy_us": 5600.0' in facts and '"median_gap_us": 0.4' in facts
