"""What a profiling window records (``detail``): every operator, or only the classifier's spans."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from autotune.errors import ConfigError, TraceFormatError
from autotune.profiling import classify, load_trace, profile_window
from autotune.profiling.detail import resolve_detail
from autotune.profiling.kinds import Category
from tests.profiling import programs

DATA = Path(__file__).parent / "data"


def _categories(path: Path) -> dict[str, set[str]]:
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    out: dict[str, set[str]] = {}
    for e in events:
        if e.get("ph") == "X":
            out.setdefault(e.get("cat"), set()).add(e["name"])
    return out


def test_spans_keep_the_step_and_data_spans_and_drop_the_operators(tmp_path):
    enable = torch.autograd.profiler._enable_profiler
    result = profile_window(
        programs.mlp_step(mark_wait=True),
        out_dir=tmp_path,
        wait=0,
        warmup=1,
        active=2,
        unprofiled_steps=1,
        detail="spans",
    )
    assert result.detail == "spans"
    assert torch.autograd.profiler._enable_profiler is enable, "the profiler's entry is restored"
    cats = _categories(result.trace_path)
    assert "cpu_op" not in cats
    assert {"ProfilerStep#1", "ProfilerStep#2", "autotune.data_wait"} <= cats["user_annotation"]
    assert load_trace(result.trace_path).detail == "spans"
    # CPU-only buckets come from operators: the classifier refuses rather than guess.
    with pytest.raises(
        TraceFormatError,
        match=r"rank0.pt.trace.json.gz: a CPU-only trace recorded with detail='spans'",
    ):
        classify(tmp_path)


@pytest.mark.exclusive  # its dominant bucket is launch overhead on a quiet host only
def test_auto_records_every_operator_on_cpu(tmp_path):
    result = profile_window(
        programs.tiny_ops_step(), out_dir=tmp_path, wait=0, warmup=1, active=1, unprofiled_steps=1
    )
    assert result.detail == "ops"
    assert "aten::tanh" in _categories(result.trace_path)["cpu_op"]
    assert load_trace(result.trace_path).detail == "ops"
    assert classify(tmp_path).dominant == "launch_overhead"


def test_auto_is_spans_on_cuda_and_ops_on_cpu():
    assert resolve_detail("auto", cuda=True) == "spans"
    assert resolve_detail("auto", cuda=False) == "ops"
    assert resolve_detail("ops", cuda=True) == "ops"
    with pytest.raises(
        ConfigError, match=r"profile_window.detail: 'all' is not one of \['auto', 'ops', 'spans'\]"
    ):
        profile_window(lambda: None, out_dir=Path("unused"), detail="all")


def test_a_gpu_trace_without_operators_keeps_windows_kernels_and_device_buckets():
    """What a spans window writes on CUDA, made from an ops trace by dropping its cpu_op events."""
    full = load_trace(DATA / "gpu_basic.json.gz")
    spans = load_trace(DATA / "gpu_basic.json.gz")
    spans.host = spans.host.take(spans.host.category != Category.HOST_OP)
    assert len(spans.host) < len(full.host)
    want, got = classify([full]), classify([spans])
    for a, b in zip(want.ranks[0].steps, got.ranks[0].steps):
        assert (b.start_ns, b.end_ns, b.kernels) == (a.start_ns, a.end_ns, a.kernels)
        for bucket in ("compute_serial", "data_stall"):
            assert b.buckets_ns[bucket] == a.buckets_ns[bucket]
        assert sum(b.buckets_ns.values()) == b.end_ns - b.start_ns
    assert got.top_kernels == want.top_kernels
