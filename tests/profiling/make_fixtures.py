"""Write the hand-made traces under tests/profiling/data/ (their answers are in data/golden/).

Command::

    .venv/bin/python tests/profiling/make_fixtures.py

Every layout below is small enough to classify on paper; the comments give the arithmetic that
the golden files record. Times are microseconds from the trace's t0. The traces under
data/kineto_2021/ are written in Kineto's 2021 format (:mod:`autotune.profiling.synth2021`,
following the fields of that time exactly; no real 2021 trace is copied): a training loop with
the structure of kineto's ResNet-50 samples, its loader in the main process or 4 workers ahead.
"""

from __future__ import annotations

from pathlib import Path

from autotune.profiling.synth import TraceBuilder
from autotune.profiling.synth2021 import Kineto2021Builder

DATA = Path(__file__).parent / "data"
NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"


def gpu_basic() -> TraceBuilder:
    """Step 1: window [0, 115): compute 43, comm 34, data 18, launch 16, other 4.

    Step 2: window [1000, 1110), ten tiny kernels: compute 20, launch 79 (operators [1010, 1108)
    and kernel-to-kernel gaps, less the kernels in them), other 11 ([1000, 1010) and [1109, 1110)).
    """
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.annotation(NEXT, 2, 18)  # data [2, 20)
    b.op("aten::mm", 22, 8)  # launch [22, 30)
    b.launch(GEMM, 24, 4, 30, 30)  # compute [30, 60)
    b.op("aten::add", 35, 5)
    b.launch(ADD, 36, 3, 70, 10)  # compute [70, 80)
    b.op("c10d::allreduce_", 62, 4)  # host collective [62, 66) while the device idles
    b.launch(NCCL, 63, 2, 75, 35, stream=13)  # comm [80, 110) (75..80 hidden by compute)
    b.op("aten::to", 88, 8)
    b.launch(
        "Memcpy DtoH (Device -> Pinned)", 90, 5, 112, 3, api="cudaMemcpyAsync", cat="gpu_memcpy"
    )
    # Ignored: Python stack events and the device-side copy of the step annotation.
    b._x("python_function", "torch/nn/modules/module.py(1520): _call_impl", 21, 40, b.pid, b.tid)
    b._x("gpu_user_annotation", "ProfilerStep#1", 30, 85, 0, 7)
    # Step 2 starts 902 us after the last device work: that gap is too long to be a launch gap.
    b.step(2, 1000, 110)
    for i in range(10):
        b.op("aten::add", 1010 + 10 * i, 8)
        b.launch(ADD, 1012 + 10 * i, 4, 1017 + 10 * i, 2)
    return b


GRAPH_SHAPES = ("none", "zero", "foreign", "first")
"""How the kernels of a replayed graph may be correlated (``TraceBuilder.graph_launch``)."""


def gpu_graph(correlation: str = "launch") -> TraceBuilder:
    """A cudaGraphLaunch replays 50 kernels on two streams; an NCCL kernel on a third.

    Each step's window is [0, 140): compute 100 (the two streams' union is [20, 120)),
    comm 22 (host record_param_comms [16, 18) + NCCL [120, 140)), launch 10, other 8.
    The same answer holds for every ``correlation`` of the graph's kernels (GRAPH_SHAPES).
    """
    b = TraceBuilder()
    for n, t in ((5, 0), (6, 1000)):
        b.step(n, t, 50)
        b.op("CUDAGraph::replay", t + 5, 10)
        kernels = [(f"graph_kernel_{j}", t + 20 + 4 * j, 3, 7) for j in range(25)]
        kernels += [(f"graph_kernel_{j}", t + 21 + 4 * j, 3, 8) for j in range(25)]
        b.graph_launch(t + 8, 6, kernels, correlation)
        b.op("record_param_comms", t + 16, 2)
        b.launch(NCCL, t + 16.5, 1, t + 110, 30, stream=9)
    return b


def two_ranks(rank: int) -> TraceBuilder:
    """Rank 0 waits in NCCL for rank 1, whose GEMM is 50 us longer.

    rank 0: window [0, 140): compute 80, comm 50, launch 8, other 2.
    rank 1: window [0, 145): compute 130, comm 5, launch 8, other 2. Straggler: rank 1.
    """
    b = TraceBuilder(rank=rank, world_size=2, run_id="run-a", pid=100 + rank, tid=100 + rank)
    gemm_end = 90 if rank == 0 else 140
    for n, t in ((3, 0), (4, 1000)):
        b.step(n, t, 20)
        b.op("aten::mm", t + 2, 8)
        b.launch(GEMM, t + 3, 5, t + 10, gemm_end - 10)
        b.launch(NCCL, t + 9, 0.5, t + gemm_end, 140 - gemm_end + 5 * rank, stream=13)
    return b


def cpu_only() -> TraceBuilder:
    """A CPU-only step of [0, 1500) (cpu_dispatch_us=5, launch_gap_max_us=500).

    compute 218: addmm's self time [120, 290) minus its child expand [125, 127) minus the
      5 us dispatch [120, 125) = 163, and mul [700, 760) minus 5 = 55; randn is inside the
      data-loader span, so it is no compute.
    comm 380: c10d::allreduce_ [320, 330) and gloo:all_reduce [325, 700) on gloo's thread.
    data 100: autotune.data_wait [0, 100).
    launch 62: [100, 127) (gap, linear, t, addmm's dispatch), [290, 320) (end of linear, a
      20 us Python gap), [700, 705) (mul's dispatch).
    other 740: [760, 1500), no operator and a gap of 1250 us to the next one.
    """
    b = TraceBuilder()
    for n, t in ((7, 0), (8, 2000)):
        b.step(n, t, 1500)
        b.annotation("autotune.data_wait", t, 100)
        b.op("aten::randn", t + 10, 50)
        b.op("aten::linear", t + 110, 190)
        b.op("aten::t", t + 112, 3)
        b.op("aten::addmm", t + 120, 170)
        b.op("aten::expand", t + 125, 2)
        b.op("c10d::allreduce_", t + 320, 10)
        b.annotation("gloo:all_reduce", t + 325, 375, tid=77)
        b.op("aten::mul", t + 700, 60)
    return b


SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
LOADERS = {0: (SINGLE, 900), 4: (MULTI, 40)}
"""num_workers -> the loader's span and how long the host waits in it (us): making a batch in
the main process takes 900 us; with 4 workers a batch is waiting in the queue."""
CONV, WGRAD = "volta_scudnn_128x64_relu_interior_nn_v1", "wgrad_alg0_engine"
SGD = "multi_tensor_apply_kernel"
AUTOGRAD_TID = 4243  # backward ran on the autograd engine's device thread then


class _Stream:
    """One device stream: work starts 4 us after its call returns, once what came before is done."""

    def __init__(self, free: float = 0.0) -> None:
        self.free = free

    def run(self, after: float, dur: float) -> float:
        start = max(after + 4, self.free)
        self.free = start + dur
        return start


def _kernel(
    b: TraceBuilder, stream: _Stream, name: str, host_ts: float, dur: float, tid=None
) -> None:
    b.launch(name, host_ts, 8, stream.run(host_ts + 8, dur), dur, tid=tid)


def _loader_step(b: TraceBuilder, n: int, t: float, workers: int, stream: _Stream) -> float:
    """One step of the loop; returns when the host ended it.

    The device is behind the host in the backward (150 us kernels launched every 75 us), so
    when a step ends ~330 us of its kernels are still queued: they hide a 40 us wait on a
    loader 4 workers ahead, not a 900 us one in the main process.
    """
    name, wait = LOADERS[workers]
    b.annotation(name, t + 5, wait)
    h = t + wait + 8
    # batch.to("cuda") from pageable memory: the call returns once the stream reached the copy.
    start = stream.run(h + 11, 120)
    b.op("aten::to", h, start + 124 - h)
    b.op("aten::copy_", h + 2, start + 121 - h)
    corr = b.runtime("cudaMemcpyAsync", h + 3, start + 120 - (h + 3))
    b.device_event("Memcpy HtoD (Pageable -> Device)", start, 120, corr, cat="gpu_memcpy")
    b.flow(corr, h + 3, start)
    b.runtime("cudaStreamSynchronize", start + 121, 2)
    h = start + 130
    for _ in range(4):  # forward: the device keeps up
        b.op("aten::conv2d", h, 60)
        _kernel(b, stream, CONV, h + 30, 50)
        h += 65
    b.op("aten::nll_loss", h, 20)
    _kernel(b, stream, SGD, h + 5, 5)
    h += 25
    for _ in range(4):  # backward, on the autograd thread: the device falls behind
        b.op("CudnnConvolutionBackward", h, 70, tid=AUTOGRAD_TID)
        _kernel(b, stream, WGRAD, h + 40, 150, tid=AUTOGRAD_TID)
        h += 75
    b.annotation("Optimizer.step#SGD.step", h, 110)
    for i in range(4):
        b.op("aten::add_", h + 5 + 25 * i, 20)
        _kernel(b, stream, SGD, h + 10 + 25 * i, 20)
    h += 112
    b.step(n, t, h - t)
    return h


def loader_run(workers: int, builder: type[TraceBuilder] = Kineto2021Builder) -> TraceBuilder:
    """Three profiled steps (ProfilerStep#5-7) of the loop, after unprofiled ones: the device is
    still running step 4's last 300 us of kernels when the trace begins (their correlation ids
    are below every call in it; launched before the window, they belong to no step)."""
    b = builder(pid=4242, tid=4242)
    for i in range(6):
        b.device_event(WGRAD if i < 2 else SGD, 50 * i, 50, 900 + i)
    b._corr = 1000
    stream, t = _Stream(free=300), 0.0
    for n in (5, 6, 7):
        t = _loader_step(b, n, t, workers, stream) + 3
    return b


def main() -> None:
    gpu_basic().write(DATA / "gpu_basic.json.gz")
    gpu_graph().write(DATA / "gpu_graph.json.gz")
    for shape in GRAPH_SHAPES:
        gpu_graph(shape).write(DATA / "graph_shapes" / f"{shape}.json.gz")
    for rank in (0, 1):
        two_ranks(rank).write(DATA / "two_ranks" / f"rank{rank}.pt.trace.json.gz")
    cpu_only().write(DATA / "cpu_only.json.gz")
    for workers in LOADERS:
        loader_run(workers).write(
            DATA / "kineto_2021" / f"resnet_workers{workers}.pt.trace.json.gz"
        )


if __name__ == "__main__":
    main()
