"""The loader benchmark on the CPU: both layouts of the same episodes, one row per format and
worker count, and the per-sample costs of random access."""

from __future__ import annotations

import json
from dataclasses import replace

from autotune.benchmarks.loader import main
from autotune.data import make_dataset
from autotune.data.cache import cache_path, spec_for
from autotune.workloads.gr00t_n16.data import read_spec
from autotune.workloads.gr00t_n16.presets import get_preset


def test_formats_compared_on_the_same_episodes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    spec = replace(spec_for(read_spec(get_preset("tiny")), 2), frames=10)
    for fmt in (
        "v2.1",
        "v3.0",
    ):  # made here, in this process: a spawned maker costs seconds of imports
        make_dataset(cache_path(replace(spec, format=fmt)), replace(spec, format=fmt))
    out = tmp_path / "loader.json"
    argv = ["--preset", "tiny", "--format", "v2.1", "v3.0", "--workers", "0", "--batches", "2", "--warmup", "0",
            "--batch-size", "2", "--samples", "3", "--episodes", "2", "--frames", "10", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    r = json.loads(out.read_text())
    assert [(row["format"], row["workers"]) for row in r["loader"]] == [("v2.1", 0), ("v3.0", 0)]
    v2, v3 = r["formats"]["v2.1"], r["formats"]["v3.0"]
    assert (v2["frames"], v2["episodes"]) == (v3["frames"], v3["episodes"])  # the same episodes
    assert (v2["per_sample"]["video_files"], v3["per_sample"]["video_files"]) == (4, 2)
    assert all(row["samples_per_s"]["overall"] > 0 for row in r["loader"])
    assert "v3.0" in capsys.readouterr().out


def test_a_bad_input_is_one_line_before_any_measurement(tmp_path, capsys):
    """A --dataset that is not one, and a --json that cannot be written (found only after the
    measurement, its results lost), were tracebacks."""
    (tmp_path / "a").write_text("a file")
    assert main(["--dataset", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"loader: error: {tmp_path / 'none'}: not a dataset folder (missing); give the folder lerobot wrote"
    ]
    assert main(["--json", str(tmp_path / "a" / "x.json")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"loader: error: --json {tmp_path / 'a'}: is a file, not a folder; give a folder (it is created "
        "if needed)"
    ]
