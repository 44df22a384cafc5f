"""The streaming loader: chunk boundaries anywhere, columns as the file says."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune.profiling import classify, load_trace, load_traces
from autotune.profiling import trace as trace_module
from autotune.profiling.kinds import Category

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("chunk", [1, 7, 100])
def test_any_chunk_size_gives_the_same_result(monkeypatch, chunk):
    want = classify(DATA / "gpu_basic.json.gz").to_dict()
    monkeypatch.setattr(trace_module._Reader, "CHUNK", chunk)
    assert classify(DATA / "gpu_basic.json.gz").to_dict() == want


def test_columns_hold_nanoseconds_and_correlations():
    t = load_trace(DATA / "gpu_basic.json.gz")
    assert len(t.device) == 14  # 4 device events in step 1, 10 in step 2
    assert set(np.unique(t.host.category)) == {
        Category.HOST_OP,
        Category.ANNOTATION,
        Category.RUNTIME,
    }
    gemm = t.names.index(
        "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1"
    )
    [row] = np.flatnonzero(t.device.name == gemm)
    assert t.device.end[row] - t.device.start[row] == 30_000
    launch = np.flatnonzero(t.host.corr == t.device.corr[row])
    assert [t.names[i] for i in t.host.name[launch]] == ["cudaLaunchKernel"]
    # python_function and gpu_user_annotation events are dropped at load time.
    assert "torch/nn/modules/module.py(1520): _call_impl" not in [t.names[i] for i in t.host.name]


def test_folder_is_sorted_by_rank_with_metadata():
    traces = load_traces(DATA / "two_ranks")
    assert [(t.rank, t.world_size, t.run_id) for t in traces] == [(0, 2, "run-a"), (1, 2, "run-a")]
