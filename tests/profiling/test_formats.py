"""Traces from elsewhere: Kineto's 2021 format, another accelerator, a GPU trace without its device side."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from autotune.errors import TraceFormatError
from autotune.profiling import classify, load_trace
from autotune.profiling.kinds import Category
from autotune.profiling.synth import TraceBuilder
from tests.clirun import autotune, one_line_error
from tests.profiling.make_fixtures import LOADERS, gpu_basic, loader_run

DATA = Path(__file__).parent / "data" / "kineto_2021"


def _steps(result):
    return [(s.step, s.time_ns, s.kernels, s.buckets_ns) for r in result.ranks for s in r.steps]


def test_a_loader_in_the_main_process_is_a_large_data_stall():
    got = classify(DATA / "resnet_workers0.pt.trace.json.gz")
    assert got.device == "gpu" and got.steps == 3
    assert got.buckets["data_stall"] > 0.25
    # each step waits 900 us on the loader; step 4's queued kernels hide the first ~300 us of it
    assert all(s.buckets_ns["data_stall"] >= 550_000 for s in got.ranks[0].steps)


def test_a_loader_four_workers_ahead_is_no_data_stall():
    got = classify(DATA / "resnet_workers4.pt.trace.json.gz")
    assert got.steps == 3
    assert [s.buckets_ns["data_stall"] for s in got.ranks[0].steps] == [0, 0, 0]
    assert got.dominant == "compute_serial"


@pytest.mark.parametrize("workers", list(LOADERS))
def test_the_2021_format_reads_as_todays_twin(tmp_path, workers):
    """The same loop written in today's categories gives the same steps, to the nanosecond."""
    twin = loader_run(workers, TraceBuilder).write(tmp_path / "today.json.gz")
    old, new = classify(DATA / f"resnet_workers{workers}.pt.trace.json.gz"), classify(twin)
    assert _steps(old) == _steps(new)
    assert old.top_kernels == new.top_kernels and old.sync_calls == new.sync_calls


def test_2021_operators_and_spans_are_told_apart_by_name():
    t = load_trace(DATA / "resnet_workers0.pt.trace.json.gz")
    cat = {t.names[n]: Category(c) for n, c in zip(t.host.name, t.host.category)}
    assert cat["ProfilerStep#5"] == cat["Optimizer.step#SGD.step"] == Category.ANNOTATION
    assert cat["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"] == Category.ANNOTATION
    assert cat["aten::conv2d"] == cat["CudnnConvolutionBackward"] == Category.HOST_OP
    assert cat["cudaLaunchKernel"] == cat["cudaMemcpyAsync"] == Category.RUNTIME
    assert "Memcpy HtoD (Pageable -> Device)" in {t.names[n] for n in t.device.name}
    assert t.device_properties == 1


def _mtia() -> TraceBuilder:
    b = TraceBuilder()
    b.step(1, 0, 500)
    b.op("aten::linear", 10, 200)
    b._x("mtia_runtime", "mtiaLaunchKernel", 20, 15, b.pid, b.tid, {"correlation": 7})
    b._x("mtia_ccp_events", "fused_linear", 40, 150, 1, 1, {"correlation": 7})
    return b


def test_an_mtia_trace_is_refused_naming_the_accelerator(tmp_path):
    path = _mtia().write(tmp_path / "mtia.json")
    with pytest.raises(
        TraceFormatError,
        match=r"mtia\.json: a trace of MTIA accelerator activity \(1 mtia_ccp_events, "
        r"1 mtia_runtime events\)",
    ):
        classify(path)
    line = one_line_error(autotune("classify", path))
    assert "MTIA accelerator" in line and "CUDA or ROCm GPU traces and CPU-only traces" in line


def test_a_range_profiler_trace_is_refused(tmp_path):
    b = gpu_basic()
    b._x(
        "cuda_profiler_range",
        "gemm",
        30,
        30,
        0,
        0,
        {"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 9},
    )
    with pytest.raises(
        TraceFormatError,
        match=r"r\.json: a trace of CUPTI's range profiler \(1 cuda_profiler_range",
    ):
        classify(b.write(tmp_path / "r.json"))


def _stripped(tmp_path: Path, drop: set[str], **meta) -> Path:
    """gpu_basic's events less the categories in ``drop``."""
    doc = gpu_basic().to_dict()
    doc.update(meta)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in drop]
    path = tmp_path / "stripped.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


@pytest.mark.parametrize(("drop", "meta", "message"), [
    (DEVICE_CATS, {}, r"14 kernel launches but no device activity"),
    (DEVICE_CATS | {"cuda_runtime"}, {}, r"a GPU trace without its device events \(it has 28 ac2g, "
                                         r"1 gpu_user_annotation events"),
    (DEVICE_CATS | {"cuda_runtime", "ac2g", "gpu_user_annotation"}, {"distributedInfo": {"backend": "nccl", "rank": 0}},
     r"a GPU trace without its device events \(it has a process group on 'nccl'"),
], ids=["device", "device+runtime", "all-but-nccl"])  # fmt: skip
def test_a_gpu_trace_stripped_of_its_device_side_is_refused(tmp_path, drop, meta, message):
    with pytest.raises(TraceFormatError, match=r"stripped\.json\.gz: " + message):
        classify(_stripped(tmp_path, drop, **meta))


def test_a_cpu_trace_of_a_gpu_machine_says_so(tmp_path):
    everything = DEVICE_CATS | {"cuda_runtime", "ac2g", "gpu_user_annotation"}
    got = classify(_stripped(tmp_path, everything, deviceProperties=[{"id": 0}, {"id": 1}]))
    assert got.device == "cpu"
    assert got.notes == (
        "the profiler saw 2 GPU(s) on the machine (deviceProperties) but traced no GPU activity: "
        "classified as a CPU-only run (profile with ProfilerActivity.CUDA for GPU work)",
    )
    proc = autotune("classify", tmp_path / "stripped.json.gz")
    assert proc.returncode == 0 and "note: the profiler saw 2 GPU(s)" in proc.stdout


def test_runtime_calls_without_launches_are_a_cpu_run_with_a_note(tmp_path):
    """A CPU model on a GPU machine: the profiler records a device query and a sync with nothing to wait for."""
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.op("aten::mm", 10, 50)
    b.runtime("cudaGetDeviceCount", 2, 1)
    b.runtime("cudaDeviceSynchronize", 80, 2)
    got = classify(b.write(tmp_path / "cpu.json"))
    assert got.device == "cpu" and got.notes[0].startswith(
        "the profiler recorded 2 CUDA runtime calls but traced no GPU"
    )


def test_classify_refuses_a_negative_duration_naming_the_event(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.op("aten::mm", 10, 20)
    b.op("aten::add", 40, -5)
    path = b.write(tmp_path / "neg.json")
    line = one_line_error(autotune("classify", path))
    assert line == (
        f"autotune: error: {path}: event 'aten::add' at ts 1700000000040.0 has a negative duration "
        "(-5.0 us); a complete event needs a time and a dur >= 0"
    )


def test_pre_window_kernels_of_the_fixtures_belong_to_no_step():
    t = load_trace(DATA / "resnet_workers4.pt.trace.json.gz")
    got = classify(DATA / "resnet_workers4.pt.trace.json.gz")
    early = t.device.corr < 1000
    assert early.sum() == 6 and np.all(t.device.start[early] < t.device.start[~early].min())
    assert [s.kernels for s in got.ranks[0].steps] == [14, 14, 14]
