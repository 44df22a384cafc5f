"""DevicePrefetcher: a timed pass-through on the CPU; asynchronous copies on CUDA (GPU machine)."""

from __future__ import annotations

import time

import pytest
import torch

from autotune.data import DevicePrefetcher
from autotune.data.prefetch import WAIT_RANGE


def slow_batches(n: int, delay: float = 0.02):
    for i in range(n):
        time.sleep(delay)
        yield {"x": torch.full((2, 3), float(i)), "id": torch.tensor([i]), "name": f"b{i}"}


def test_cpu_pass_through_times_the_waits():
    pf = DevicePrefetcher(slow_batches(4), "cpu", depth=2)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        got = [next(pf)]
        assert pf.last_wait_s >= 0.015
        got += list(pf)
    assert [int(b["id"]) for b in got] == [0, 1, 2, 3] and got[2]["name"] == "b2"
    assert all(b["x"].device.type == "cpu" for b in got)
    assert 0.08 <= pf.wait_s < 1.0
    names = [e.name for e in prof.events()]
    assert names.count(WAIT_RANGE) == 5  # four batches and the final StopIteration


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("depth", [0, 1, 3])
def test_cuda_copies_arrive_intact_and_in_order(depth):
    def pinned(n):
        for b in slow_batches(n, delay=0.0):
            yield {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in b.items()}

    pf = DevicePrefetcher(pinned(6), "cuda", depth=depth)
    out = []
    for batch in pf:
        assert batch["x"].is_cuda
        torch.cuda._sleep(1_000_000)  # keep the consumer's stream busy while copies run ahead
        out.append((batch["x"] * 2).sum().item())
    assert out == [12.0 * i for i in range(6)]
