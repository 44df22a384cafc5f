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

from autotune.profiling import classify, data_wait, load_traces, profile_window
from autotune.profiling.kinds import Category
from tests.profiling import programs
from tests.profiling.census import GraphKernelsNotTraced, check_graph_replays
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


@pytest.mark.parametrize("detail", ["ops", "spans"])
def test_thousands_of_tiny_kernels_are_launch_overhead(tmp_path, detail):
    x = torch.zeros(1, device="cuda")

    def step():
        for _ in range(2000):
            x.add_(1.0)

    result, got = _profile(
        step, tmp_path, f"tiny_{detail}", active=3, unprofiled_steps=3, detail=detail
    )
    print(
        f"{detail}: profiled {result.profiled_step_ms:.2f} ms, unprofiled {result.unprofiled_step_ms:.2f} ms"
    )
    assert result.detail == detail
    [trace] = load_traces(tmp_path)
    operators = int((trace.host.category == Category.HOST_OP).sum())
    assert (operators > 0) == (detail == "ops")
    assert got.dominant == "launch_overhead"
    assert got.launch.kernels_per_step == pytest.approx(2000, abs=5)
    assert result.overhead > -0.5


@pytest.mark.parametrize(
    "earlier_session", [False, True], ids=["first_session", "after_an_earlier_session"]
)
def test_cuda_graph_replay_attributes_every_kernel(tmp_path, earlier_session):
    """Each replay's kernels are counted in its step, whatever correlation CUPTI gave them.

    Runs in a fresh process, so that no other test's profiler session changes CUPTI's state.
    Every failure message carries the census of the raw trace (``tests/profiling/census.py``).
    """
    torch.multiprocessing.spawn(
        programs.graph_replay_worker, args=(str(tmp_path), earlier_session), nprocs=1
    )
    out = tmp_path / "graph"
    keep = os.environ.get("AUTOTUNE_TRACE_OUT")
    if keep:
        name = f"graph_{'later' if earlier_session else 'first'}"
        shutil.copytree(out, Path(keep, name), dirs_exist_ok=True)
    try:
        facts = check_graph_replays(out, want=2 * programs.GRAPH_OPS)
    except GraphKernelsNotTraced as exc:
        if earlier_session:
            pytest.xfail(str(exc))
        raise
    print(facts)
    assert classify(out).launch.kernels_per_step == pytest.approx(2 * programs.GRAPH_OPS, abs=2)


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
