"""Small torch programs profiled by the tests, each with a known bottleneck."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from torch import nn

from autotune.profiling import data_wait, profile_window


class SleepyDataset(torch.utils.data.Dataset):
    """Each item costs ``delay_s`` of sleep: the data loader, not the model, bounds the step."""

    def __init__(self, delay_s: float = 0.02, n: int = 10_000) -> None:
        self.delay_s, self.n = delay_s, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.delay_s)
        return torch.randn(32), torch.randn(4)


def mlp_step(mark_wait: bool = True):
    """A tiny MLP fed by :class:`SleepyDataset` (batch 2: 40 ms of data per step)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = iter(torch.utils.data.DataLoader(SleepyDataset(), batch_size=2))

    def step():
        if mark_wait:
            with data_wait():
                x, y = next(batches)
        else:
            x, y = next(batches)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


class ManyTinyOps(nn.Module):
    """Hundreds of operators on 32 numbers per step: dispatch, not arithmetic, costs the time."""

    def __init__(self, layers: int = 150) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(layers, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.w.shape[0]):
            x = torch.tanh(x * self.w[i] + 0.01)
        return x.sum()


def tiny_ops_step():
    model = ManyTinyOps()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 8)

    def step():
        loss = model(x)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


class BigGradient(nn.Module):
    """A tiny layer plus an 8M-element parameter whose gradient costs one in-place add to form."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(8, 8)
        self.table = nn.Parameter(torch.zeros(8 * 2**20))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x).square().mean() + self.table.sum()


def ddp_worker(
    rank: int, world_size: int, port: int, out_dir: str, run_id: str, backend: str = "gloo"
) -> None:
    """One rank of a gloo DDP job whose 32 MB gradient dwarfs its compute: comm_wait dominates.

    Gradients are views of DDP's buckets, and there is no optimizer: any pass over the 32 MB
    of parameters costs a good fraction of the all-reduce on this machine.
    """
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.distributed.init_process_group(backend, rank=rank, world_size=world_size)
    try:
        torch.manual_seed(0)
        model = nn.parallel.DistributedDataParallel(
            BigGradient().to(device), gradient_as_bucket_view=True
        )
        x = torch.randn(4, 8, device=device)

        def step():
            model(x).backward()

        result = profile_window(
            step,
            out_dir=out_dir,
            rank=rank,
            world_size=world_size,
            wait=1,
            warmup=1,
            active=3,
            unprofiled_steps=3,
            run_id=run_id,
        )
        Path(out_dir, f"overhead{rank}.txt").write_text(str(result.overhead))
        # A rank that leaves first can close gloo's sockets while its peer still reads the tail
        # of the last all-reduce: the peer aborts ("terminate called without an active
        # exception", seen once in CI). Leave together.
        torch.distributed.barrier()
    finally:
        torch.distributed.destroy_process_group()


GRAPH_OPS = 200
"""In-place ops captured in the test graph: two kernels each (mul_, add_)."""
GRAPH_NUMEL = 1 << 23
"""Elements of the test graph's tensor: 32 MB, so each kernel runs ~15 µs on an H200, longer
than the 1.9-2.6 µs per node that ``cudaGraphLaunch`` took under the profiler on the H200.
With 1024 elements (~1 µs kernels) the H200 trace (torch 2.11, CUDA 13.0) had the device idle
between the nodes for 56 % of each step while the host was in ``cudaGraphLaunch`` or
synchronising: launch_overhead by definition, not a misattribution (every kernel was counted in
its step)."""


def capture_graph() -> torch.cuda.CUDAGraph:
    """A CUDA graph of ``2 * GRAPH_OPS`` elementwise kernels, warmed up on a side stream."""
    x = torch.zeros(GRAPH_NUMEL, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            x.mul_(0.5).add_(1.0)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_OPS):
            x.mul_(0.5).add_(1.0)
    return graph


def graph_replay_worker(_index: int, out_dir: str, earlier_session: bool) -> None:
    """Profile replays of :func:`capture_graph` into ``out_dir/graph``, in a process of its own.

    The graph is captured before this process's profiler runs, as ``autotune profile`` of a
    whole-step graph does. With ``earlier_session``, a profiling window of eager kernels runs
    first (into ``out_dir/earlier``), so that the replays are traced in a later session: the
    shape in which the test failed on the H200 when it ran after the other GPU tests.
    """
    if earlier_session:
        y = torch.zeros(1, device="cuda")
        profile_window(
            lambda: y.add_(1.0), out_dir=Path(out_dir, "earlier"), active=1, unprofiled_steps=1
        )
    graph = capture_graph()
    profile_window(graph.replay, out_dir=Path(out_dir, "graph"), active=3, unprofiled_steps=3)
