"""The classifier on real CUDA traces from profile_window (skipped without a GPU).

    python -m pytest tests/profiling/test_gpu.py        # on the GPU machine

With ``AUTOTUNE_TRACE_OUT`` set, the traces are also copied there (one folder per test).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from autotune.profiling import classify, data_wait, profile_window
from tests.profiling import programs
from tests.profiling.programs import SleepyDataset

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _profile(step, out: Path, name: str, **window):
    result = profile_window(step, out_dir=out, **window)
    keep = os.environ.get("AUTOTUNE_TRACE_OUT")
    if keep:
        Path(keep, name).mkdir(parents=True, exist_ok=True)
        shutil.copy(result.trace_path, Path(keep, name, result.trace_path.name))
    return result, classify(out)


def test_large_matmuls_are_compute(tmp_path):
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def step():
        for _ in range(8):
            a.copy_(a @ a * 1e-4)

    _, got = _profile(step, tmp_path, "gemm", active=3, unprofiled_steps=2)
    assert got.device == "gpu"
    assert got.dominant == "compute_serial"
    assert got.buckets["compute_serial"] > 0.9
    assert got.launch.kernels_per_step >= 16


def test_thousands_of_tiny_kernels_are_launch_overhead(tmp_path):
    x = torch.zeros(1, device="cuda")

    def step():
        for _ in range(2000):
            x.add_(1.0)

    result, got = _profile(step, tmp_path, "tiny", active=3, unprofiled_steps=3)
    assert got.dominant == "launch_overhead"
    assert got.launch.kernels_per_step == pytest.approx(2000, abs=5)
    assert result.overhead > -0.5


def test_cuda_graph_replay_attributes_every_kernel(tmp_path):
    x = torch.zeros(1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            x.mul_(0.5).add_(1.0)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(200):
            x.mul_(0.5).add_(1.0)

    _, got = _profile(graph.replay, tmp_path, "graph", active=3, unprofiled_steps=3)
    assert got.launch.kernels_per_step == pytest.approx(400, abs=2)
    assert got.dominant == "compute_serial"


def test_a_starved_loader_is_data_stall(tmp_path):
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = iter(torch.utils.data.DataLoader(SleepyDataset(), batch_size=2))

    def step():
        with data_wait():
            x, y = next(batches)
        loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
        opt.zero_grad()
        loss.backward()
        opt.step()

    _, got = _profile(step, tmp_path, "data", active=3, unprofiled_steps=2)
    assert got.dominant == "data_stall"
    assert got.buckets["data_stall"] > 0.8


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_nccl_ddp_two_ranks(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    torch.multiprocessing.spawn(
        programs.ddp_worker, args=(2, port, str(tmp_path), "nccl-run", "nccl"), nprocs=2
    )
    keep = os.environ.get("AUTOTUNE_TRACE_OUT")
    if keep:
        shutil.copytree(tmp_path, Path(keep, "nccl"), ignore=shutil.ignore_patterns("*.txt"))
    got = classify(tmp_path)
    assert [r.rank for r in got.ranks] == [0, 1]
    assert any(k.name.startswith("nccl") for k in got.top_kernels)
    for r in got.ranks:
        assert r.buckets_ns["comm_wait"] > 0
    assert got.straggler is not None
