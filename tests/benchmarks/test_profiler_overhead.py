"""The profiler-overhead benchmark: medians over rounds, errors reported, a real CPU run."""

from __future__ import annotations

import json

import pytest

from autotune.benchmarks.profiler_overhead import _summary, main
from autotune.profiling import BUCKETS


def test_summary_takes_the_medians_of_the_rounds():
    runs = [
        {
            "profiled_ms": p,
            "unprofiled_ms": u,
            "events_per_step": {"host_op": 9},
            "json_mb": 1.0,
            "dominant": "other",
        }
        for p, u in ((12.0, 10.0), (11.0, 10.0), (30.0, 9.0))
    ]
    got = _summary([*runs, {"detail": "ops", "error": "RuntimeError: boom"}])
    assert (got["profiled_ms"], got["unprofiled_ms"]) == (12.0, 10.0)
    assert got["overhead"] == pytest.approx(0.2)
    assert got["rounds"] == [(12.0, 10.0), (11.0, 10.0), (30.0, 9.0)]
    assert _summary([{"detail": "spans", "error": "RuntimeError: boom"}]) == {
        "error": "RuntimeError: boom"
    }


@pytest.mark.slow
def test_a_cpu_run_of_both_details(tmp_path):
    out = tmp_path / "overhead.json"
    assert main(["--rounds", "1", "--warmup", "1", "--active", "2", "--json", str(out)]) == 0
    got = json.loads(out.read_text())["details"]
    assert got["ops"]["dominant"] in BUCKETS and got["ops"]["events_per_step"]["host_op"] > 1000
    assert "host_op" not in got["spans"]["events_per_step"]
    assert got["spans"]["dominant"].startswith("not classified")
    assert got["spans"]["json_mb"] < got["ops"]["json_mb"]
