"""Hand-made traces (tests/profiling/make_fixtures.py) against answers worked out on paper."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.profiling import BUCKETS, classify

DATA = Path(__file__).parent / "data"
GOLDEN = sorted((DATA / "golden").glob("*.json"))


@pytest.mark.parametrize("golden", GOLDEN, ids=[g.stem for g in GOLDEN])
def test_matches_golden(golden: Path):
    want = json.loads(golden.read_text())
    result = classify(DATA / want["source"])
    got = result.to_dict()
    assert got["device"] == want["device"]
    assert got["dominant"] == want["dominant"]
    assert got["steps"] == want["steps"]
    assert got["launch"] == pytest.approx(want["launch"])
    if want["straggler"] is None:
        assert got["straggler"] is None
    else:
        assert got["straggler"] == pytest.approx(want["straggler"])
    steps = {str(r.rank): {str(s.step): s for s in r.steps} for r in result.ranks}
    assert steps.keys() == want["ranks"].keys()
    for rank, per_step in want["ranks"].items():
        assert steps[rank].keys() == per_step.keys()
        for n, w in per_step.items():
            s = steps[rank][n]
            assert s.time_ns == w["step_time_us"] * 1000
            assert s.kernels == w["kernels"]
            assert s.buckets_ns == {b: w["buckets_us"][b] * 1000 for b in BUCKETS}
    top = [(k["name"], k["total_ms"] * 1000, k["count"]) for k in got["top_kernels"]]
    for i, (name, us, count) in enumerate(want["top_kernels"]):
        assert top[i] == (name, pytest.approx(us), count)


@pytest.mark.parametrize("golden", GOLDEN, ids=[g.stem for g in GOLDEN])
def test_fractions_sum_to_one(golden: Path):
    got = classify(DATA / json.loads(golden.read_text())["source"]).to_dict()
    assert list(got["buckets"]) == list(BUCKETS)
    assert sum(got["buckets"].values()) == pytest.approx(1.0, abs=1e-12)
    for r in got["ranks"]:
        assert sum(r["buckets"].values()) == pytest.approx(1.0, abs=1e-12)


def test_fixtures_are_what_the_script_writes(tmp_path, monkeypatch):
    """The committed traces are reproducible from make_fixtures.py (the answers' source)."""
    from tests.profiling import make_fixtures

    monkeypatch.setattr(make_fixtures, "DATA", tmp_path)
    make_fixtures.main()
    for made in tmp_path.rglob("*.json.gz"):
        assert made.read_bytes() == (DATA / made.relative_to(tmp_path)).read_bytes(), made.name


def test_dispatch_option_moves_cpu_time_between_compute_and_launch():
    from autotune.profiling import ClassifyOptions

    base = classify(DATA / "cpu_only.json.gz", ClassifyOptions(cpu_dispatch_us=0)).ranks[0].steps[0]
    more = (
        classify(DATA / "cpu_only.json.gz", ClassifyOptions(cpu_dispatch_us=20)).ranks[0].steps[0]
    )
    # No dispatch: addmm's self time (170 - 2 for expand) and mul's 60. With 20 us: addmm keeps
    # [140, 290), mul [720, 760).
    assert base.buckets_ns["compute_serial"] == (168 + 60) * 1000
    assert more.buckets_ns["compute_serial"] == (150 + 40) * 1000
    assert more.buckets_ns["launch_overhead"] - base.buckets_ns["launch_overhead"] == 38 * 1000
