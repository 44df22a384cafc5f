"""The trial-start benchmark on the CPU: both ways run, and the medians are of the right runs."""

from __future__ import annotations

import json
import tempfile

import pytest

from autotune.benchmarks import trial_start

pytestmark = pytest.mark.slow


def test_one_run_of_each_way_after_the_zygotes(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("AUTOTUNE_WARM_START", "1")
    assert trial_start.main(["--runs", "1", "--json", str(tmp_path / "t.json")]) == 0
    out = json.loads((tmp_path / "t.json").read_text())
    assert [r["way"] for r in out["runs"]] == ["zygote_start", "executed", "forked"]
    assert all(0 < r["start_s"] < r["wall_s"] for r in out["runs"])
    assert out["medians"]["forked"]["start_s"] == out["runs"][2]["start_s"]
    assert "median forked: start" in capsys.readouterr().out
