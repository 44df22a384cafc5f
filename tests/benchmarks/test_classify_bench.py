"""The trace benchmark takes a real trace: a file (.json or .json.gz) or a folder of one rank's trace."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from autotune.benchmarks.classify import main, one_trace, sizes
from autotune.errors import TraceFormatError
from autotune.profiling import BUCKETS

DATA = Path(__file__).parents[1] / "profiling" / "data"


def test_a_folder_of_one_rank_gives_its_trace(tmp_path):
    shutil.copy(DATA / "gpu_basic.json.gz", tmp_path / "rank0.pt.trace.json.gz")
    (tmp_path / "classification.summary").write_text("{}")
    assert one_trace(tmp_path) == tmp_path / "rank0.pt.trace.json.gz"
    assert one_trace(DATA / "gpu_basic.json.gz") == DATA / "gpu_basic.json.gz"


def test_a_folder_of_two_ranks_asks_for_one_file():
    with pytest.raises(
        TraceFormatError,
        match=r"two_ranks: 2 traces \(rank0.pt.trace.json.gz, rank1.pt.trace.json.gz\).*give one of the files",
    ):
        one_trace(DATA / "two_ranks")


def test_sizes_on_disk_and_of_the_json(tmp_path):
    packed = DATA / "gpu_basic.json.gz"
    plain = tmp_path / "t.json"
    plain.write_bytes(gzip.decompress(packed.read_bytes()))
    want_json = plain.stat().st_size / 1e6
    assert sizes(plain) == {"file_mb": want_json, "json_mb": want_json, "gzipped": False}
    got = sizes(packed)
    assert got["gzipped"] and got["json_mb"] == want_json and got["file_mb"] < want_json


@pytest.mark.slow
def test_both_tools_on_a_real_cpu_trace_folder(tmp_path):
    from autotune.profiling import profile_window
    from tests.profiling.programs import tiny_ops_step

    folder = tmp_path / "profile"
    profile_window(tiny_ops_step(), out_dir=folder, wait=0, warmup=1, active=2, unprofiled_steps=1)
    out = tmp_path / "bench.json"
    assert main([str(folder), "--repeats", "1", "--hta-repeats", "1", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["trace"] == str(folder / "rank0.pt.trace.json.gz") and got["gzipped"]
    assert got["json_mb"] > got["file_mb"] > 0
    assert got["ours"]["out"] in BUCKETS and got["ours"]["seconds"] > 0  # the dominant bucket
    assert "error" not in got["hta"], got["hta"]
    assert got["speedup"] == pytest.approx(got["hta"]["seconds"] / got["ours"]["seconds"])


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--synthetic-mb", "-5"),
        ("--synthetic-mb", "nan"),
        ("--repeats", "0"),
        ("--hta-repeats", "0"),
    ],
)
def test_a_size_or_count_out_of_range_is_refused_before_anything_is_written(
    tmp_path, capsys, flag, value
):
    """``--synthetic-mb -5`` wrote an empty trace and measured it; no repeats gave a traceback."""
    trace = tmp_path / "t.json.gz"
    argv = [str(trace), "--synthetic-mb", "1", flag, value]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and not trace.exists()
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument {flag}: " in err and "out of range" in err, err
