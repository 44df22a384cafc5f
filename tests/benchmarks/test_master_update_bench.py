"""``python -m autotune.benchmarks.master_update`` on a CPU: the torch path over N1.7's tiny tensors,
whose times mean nothing there; what it counts does."""

from __future__ import annotations

import json

import pytest

from autotune.benchmarks.master_update import main


def test_rows_count_the_bytes_a_bf16_moment_and_the_idle_slots_save(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(["--preset", "tiny", "--reps", "2", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    fp32, bf16 = rows["fp32"], rows["bf16"]
    assert fp32["elements"] == bf16["elements"] > 0
    assert all(r["update"]["median_ms"] > 0 and r["norm"]["median_ms"] > 0 for r in rows.values())
    # every element with a gradient moves 28 bytes; the idle projector slots' elements 8
    assert fp32["update_gb"] * 1e9 < 28 * fp32["elements"]
    # the bf16 first moment saves 4 bytes a busy weight with a master, nothing elsewhere
    assert 0 < fp32["update_gb"] - bf16["update_gb"] < 4 * fp32["elements"] / 1e9
    assert "update ms" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra, line",
    [
        (["--reps", "0"], "--reps 0: give 1 or more"),
        (["--preset", "huge"], "preset 'huge' of workload 'gr00t_n17' is unknown; known presets: "
         "['full', 'medium', 'tiny']"),
        (["--json", "{tmp}"], "--json {tmp}: is a folder; give the file to write (e.g. {tmp}/result.json)"),
    ],
)  # fmt: skip
def test_a_bad_input_is_one_line(tmp_path, capsys, extra, line):
    extra = [e.format(tmp=tmp_path) for e in extra]
    assert main(["--preset", "tiny", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"master_update: error: {line.format(tmp=tmp_path)}"]
