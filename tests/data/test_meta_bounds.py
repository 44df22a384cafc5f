"""A dataset's metadata numbers are range-checked and its files are read with a type and size bound:
``data check`` and loading fail fast with one line naming the file (never a hang on /dev/zero)."""

from __future__ import annotations

import json
import os
import time

import pytest

from autotune.cli import main
from autotune.data.meta import load_meta
from autotune.errors import DataError

INFO = "meta/info.json"
EPISODES = "meta/episodes.jsonl"


def _edit_info(root, **values) -> None:
    info = json.loads((root / INFO).read_text())
    info.update(values)
    (root / INFO).write_text(json.dumps(info))  # json writes NaN and Infinity as Python's names


def _check_fails(root, capsys, expected: str) -> str:
    """``data check`` and ``load_meta`` both refuse ``root`` with the one line ``expected``."""
    start = time.monotonic()
    assert main(["data", "check", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err == f"autotune: error: {expected}\n"
    with pytest.raises(DataError) as exc:
        load_meta(root)
    assert str(exc.value) == expected
    assert time.monotonic() - start < 30  # read in bounded time, not until memory runs out
    return err


@pytest.mark.parametrize(
    "fps, shown",
    [(float("nan"), "holds NaN"), (float("inf"), "holds Infinity"), (-20, "fps is -20.0")],
)
def test_a_non_finite_or_negative_fps_is_refused(broken_copy, capsys, fps, shown):
    _edit_info(broken_copy, fps=fps)
    expected = {
        "holds NaN": f"{broken_copy / INFO}: holds NaN; allowed: finite numbers",
        "holds Infinity": f"{broken_copy / INFO}: holds Infinity; allowed: finite numbers",
    }.get(shown, f"{broken_copy / INFO}: fps is -20; allowed: a number from 0.001 to 1e+06")
    _check_fails(broken_copy, capsys, expected)


def test_an_fps_beyond_a_float_is_refused(broken_copy, capsys):
    text = (broken_copy / INFO).read_text()
    (broken_copy / INFO).write_text(text.replace('"fps": 20', '"fps": 1e999'))
    _check_fails(
        broken_copy,
        capsys,
        f"{broken_copy / INFO}: fps is inf; allowed: a number from 0.001 to 1e+06",
    )


def test_a_nan_in_the_episode_stats_names_the_line(broken_copy, capsys):
    path = broken_copy / "meta/episodes_stats.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace('"mean": [', '"mean": [NaN, ', 1)
    path.write_text("\n".join(lines) + "\n")
    _check_fails(broken_copy, capsys, f"{path}: line 2 holds NaN; allowed: finite numbers")


def test_chunks_size_zero_is_refused(broken_copy, capsys):
    _edit_info(broken_copy, chunks_size=0)
    _check_fails(
        broken_copy,
        capsys,
        f"{broken_copy / INFO}: chunks_size is 0; allowed: an integer >= 1 (episodes per chunk)",
    )


def test_a_bad_format_spec_in_data_path_is_refused(broken_copy, capsys):
    template = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06q}.parquet"
    _edit_info(broken_copy, data_path=template)
    _check_fails(
        broken_copy,
        capsys,
        f"{broken_copy / INFO}: data_path {template!r} is not a path template "
        "(Unknown format code 'q' for object of type 'int')",
    )


@pytest.mark.parametrize("width", ["0999999999", "4097", "1" * 5000])
def test_a_data_path_padded_past_any_path_is_refused(broken_copy, capsys, width):
    """{episode_index:0999999999d} made a gigabyte string per episode (the check ran for minutes, its
    error line was the padded path); a width past the longest path names no file."""
    template = f"data/chunk-{{episode_chunk:{width}d}}/episode_{{episode_index:06d}}.parquet"
    _edit_info(broken_copy, data_path=template)
    _check_fails(
        broken_copy,
        capsys,
        f"{broken_copy / INFO}: data_path {template!r} pads a placeholder past 4096 characters; "
        "allowed: a width of at most 4096 (the longest path a file may have)",
    )


@pytest.mark.parametrize("name", [INFO, EPISODES])
def test_a_metadata_file_linked_to_dev_zero_fails_fast(broken_copy, capsys, name):
    (broken_copy / name).unlink()
    os.symlink("/dev/zero", broken_copy / name)
    _check_fails(
        broken_copy,
        capsys,
        f"{broken_copy / name}: is a device, not a file",
    )


def test_a_huge_sparse_episode_index_is_refused_from_its_size(broken_copy, capsys):
    path = broken_copy / EPISODES
    os.truncate(path, 3 << 30)  # sparse: no disk used
    _check_fails(
        broken_copy, capsys, f"{path}: 3072 MiB, more than the 1024 MiB such a file may hold"
    )


@pytest.mark.parametrize("fps", [1e-300, 1e300], ids=["tiny", "huge"])
def test_an_fps_no_recording_has_is_refused_naming_fps(broken_copy, capsys, fps):
    """A frame in 1e300 seconds passed as finite and > 0: the timestamps' check then blamed the
    parquet, in a line of 300-digit numbers."""
    _edit_info(broken_copy, fps=fps)
    _check_fails(
        broken_copy,
        capsys,
        f"{broken_copy / INFO}: fps is {fps:g}; allowed: a number from 0.001 to 1e+06",
    )
