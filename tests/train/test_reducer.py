"""The flat-buffer gradient reducer of whole-step graphs, on two gloo processes: every bucket
all-reduced to the mean, the buckets started inside the backward with ``overlap``."""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.distributed as dist
from torch import nn

from autotune.config import DDPConfig
from autotune.train.distributed import FlatGradReducer
from tests.ports import free_port


def _model() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    used = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    unused = nn.Linear(
        2, 2
    )  # no gradient this step: its bucket is started by the call after the backward
    return used, unused


def _worker(rank: int, world: int, port: int, out: str, overlap: bool, hook: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    used, unused = _model()
    ref_used, _ = _model()
    params = [
        *unused.parameters(),
        *used.parameters(),
    ]  # the unused first: its bucket is the last one started
    cap_mb = 40 / 2**20  # 10 fp32 values a bucket: the weights straddle buckets
    reducer = FlatGradReducer(
        params, DDPConfig(bucket_cap_mb=cap_mb, comm_hook=hook), world, overlap=overlap
    )
    started, diffs = [], []
    for step in range(2):  # the second step checks that the reducer's state was reset
        x = torch.randn(4, 5, generator=torch.Generator().manual_seed(100 * step + rank))
        reducer.begin()
        used(x).square().sum().backward()
        started.append(len(reducer._works))
        reducer()
        ref_used.zero_grad(set_to_none=True)
        ref_used(x).square().sum().backward()
        for p, q in zip(used.parameters(), ref_used.parameters(), strict=True):
            dist.all_reduce(q.grad)
            diffs.append(
                float((p.grad - q.grad / world).abs().max() / q.grad.abs().max().clamp_min(1e-12))
            )
        assert all(float(p.grad.abs().max()) == 0.0 for p in unused.parameters())
    with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
        json.dump(
            {"started": started, "buckets": len(reducer.buckets), "max_rel_diff": max(diffs)}, fh
        )
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.parametrize(
    ("overlap", "hook", "tol"), [(False, "none", 1e-6), (True, "none", 1e-6), (True, "fp16", 2e-3)]
)
def test_buckets_reduce_to_the_mean_and_overlap_starts_them_in_the_backward(
    tmp_path, overlap, hook, tol
):
    torch.multiprocessing.spawn(
        _worker, args=(2, free_port(), str(tmp_path), overlap, hook), nprocs=2, join=True
    )
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for g in got:
        assert g["max_rel_diff"] < tol, g
        # 72 values (the unused layer's 6 first, with 4 of the first used weight in bucket 0): 8 buckets of 10
        assert g["buckets"] == 8
        if overlap:  # every bucket but the one holding the unused layer starts inside the backward
            assert g["started"] == [g["buckets"] - 1] * 2, g
        else:
            assert g["started"] == [0, 0], g


def test_gradients_are_written_afresh_and_copied_into_the_buffers_not_zeroed_and_added():
    """After ``begin`` the backward writes each gradient anew; the hook copies it into its view of the
    flat buffer: no fill of the buffers and no accumulating add, one copy per parameter."""
    used, _ = _model()
    params = list(used.parameters())
    reducer = FlatGradReducer(params, DDPConfig(bucket_cap_mb=40 / 2**20), world_size=1)
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    for step in range(2):
        reducer.begin()
        assert all(p.grad is None for p in params)
        loss = used(x * (step + 1)).square().sum()
        with torch.profiler.profile() as prof:
            loss.backward()
        ops = [e.name for e in prof.events()]
        assert ops.count("aten::copy_") >= len(params), ops
        assert "aten::add_" not in ops and "aten::zero_" not in ops, ops
        reducer()
        (buffer,) = reducer.buffers
        start, end = buffer.data_ptr(), buffer.data_ptr() + buffer.numel() * buffer.element_size()
        assert all(
            start <= p.grad.data_ptr() < end for p in params
        )  # the optimizer reads the buffers
    ref = _model()[0]
    ref(x * 2).square().sum().backward()
    for p, q in zip(
        params, ref.parameters(), strict=True
    ):  # the last step's gradients, not the sum of both
        torch.testing.assert_close(p.grad, q.grad)
