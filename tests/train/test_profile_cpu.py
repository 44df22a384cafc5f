"""``autotune profile``: a window of a real configuration, one trace per rank, classified."""

from __future__ import annotations

import json

import pytest

from autotune.cli import main
from autotune.config import config_from_dict
from autotune.profiling import classify
from autotune.train.trial.launch import launch


def test_profile_cli_writes_a_trace_and_a_classification(tmp_path, capsys):
    out = tmp_path / "prof"
    assert (
        main(
            [
                "profile",
                "--preset",
                "tiny",
                "--synthetic",
                "--out",
                str(out),
                "--steps",
                "3",
                "--warmup",
                "1",
                "--json",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (out / "rank0.pt.trace.json.gz").is_file()
    cls = summary["classification"]
    assert abs(sum(cls["buckets"].values()) - 1.0) < 1e-6
    assert (
        cls["steps"] == 3 and summary["profiled_step_ms"] > 0 and summary["unprofiled_step_ms"] > 0
    )
    assert (
        json.loads((out / "classification.summary").read_text())["classification"]["dominant"]
        == cls["dominant"]
    )


def test_profile_refuses_a_non_empty_folder(tmp_path, capsys):
    (tmp_path / "old.txt").write_text("keep me")
    assert main(["profile", "--preset", "tiny", "--synthetic", "--out", str(tmp_path)]) != 0
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "old.txt").read_text() == "keep me"


@pytest.mark.slow
def test_two_rank_profile_has_per_rank_traces_and_communication(tmp_path):
    cfg = config_from_dict(
        {"preset": "tiny", "batch_size": 2, "device": "cpu", "data": {"source": "synthetic"}}
    )
    res = launch(cfg, steps=3, warmup=1, nproc=2, timeout=240, profile_out=tmp_path)
    assert res.ok and res.measurement is None, res
    assert sorted(p.name for p in tmp_path.glob("*.gz")) == [
        "rank0.pt.trace.json.gz",
        "rank1.pt.trace.json.gz",
    ]
    result = classify(tmp_path)
    assert len(result.ranks) == 2
    assert all(r.buckets_ns["comm_wait"] > 0 for r in result.ranks)
