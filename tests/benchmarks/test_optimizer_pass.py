"""The optimizer-pass benchmark runs on a CPU (the torch path) and reports every row it promises."""

from __future__ import annotations

import json

from autotune.benchmarks.optimizer_pass import layout, main


def test_the_layout_puts_only_linear_weights_of_bf16_regions_in_bf16():
    groups = layout("gr00t_n16", "tiny")
    shapes = [s for items, _ in groups for s in items]
    assert {wd for _, wd in groups} == {1e-5, 0.0}
    assert any(bf16 for _, bf16 in shapes) and not all(bf16 for _, bf16 in shapes)
    assert all(
        len(s) <= 2 for s, bf16 in shapes if bf16
    )  # never a projector's [slots, in, out] slot weight


def test_a_cpu_run_writes_each_row(tmp_path, capsys):
    out = tmp_path / "op.json"
    assert main(["--preset", "tiny", "--reps", "2", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["rows"]) == {"fused", "master", "master_norm", "master_update", "casts"}
    assert all(r["min_ms"] <= r["median_ms"] <= r["max_ms"] for r in result["rows"].values())
    assert 0 < result["bf16"] < result["trainable"]
    assert "master_update" in capsys.readouterr().out
