"""``autotune data make`` and ``autotune data check`` through the CLI's ``main``."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autotune.cli import main


def test_make_then_check(tmp_path, capsys):
    root = tmp_path / "made"
    assert (
        main(
            [
                "data",
                "make",
                str(root),
                "--episodes",
                "2",
                "--size",
                "32",
                "--frames",
                "50",
                "--seed",
                "4",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith(f"made {root}: LeRobot v2.1, 2 episodes, 100 frames")
    assert main(["data", "check", str(root)]) == 0
    out = capsys.readouterr().out
    assert (
        out.startswith(f"OK {root}: LeRobot v2.1, 2 episodes, 100 frames at 20 fps")
        and "front 32x32 h264" in out
    )


def test_check_reports_a_truncated_video(broken_copy, capsys):
    mp4 = broken_copy / "videos/chunk-000/observation.images.front/episode_000002.mp4"
    mp4.write_bytes(mp4.read_bytes()[:-2000])
    assert main(["data", "check", str(broken_copy)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"autotune: error: {mp4}: ")
        and "frames decoded; its episodes need 60" in err
    )
    assert err.count("\n") == 1


def test_check_reports_a_missing_column(broken_copy, capsys):
    path = broken_copy / "data/chunk-000/episode_000001.parquet"
    pq.write_table(pq.read_table(path).drop_columns(["timestamp"]), path)
    assert main(["data", "check", str(broken_copy)]) == 2
    assert f"{path}: missing column 'timestamp'" in capsys.readouterr().err


def test_check_reports_a_video_shorter_than_its_episode(broken_copy, tmp_path, capsys):
    short = tmp_path / "short"
    assert (
        main(["data", "make", str(short), "--episodes", "3", "--size", "64", "--frames", "40"]) == 0
    )
    mp4 = "videos/chunk-000/observation.images.wrist/episode_000000.mp4"
    (broken_copy / mp4).write_bytes((short / mp4).read_bytes())
    capsys.readouterr()
    assert main(["data", "check", str(broken_copy)]) == 2
    assert (
        f"{broken_copy / mp4}: 40 frames decoded; its episodes need 60" in capsys.readouterr().err
    )


def test_check_reports_a_missing_meta_file(broken_copy, capsys):
    (broken_copy / "meta/tasks.jsonl").unlink()
    assert main(["data", "check", str(broken_copy)]) == 2
    assert capsys.readouterr().err == f"autotune: error: {broken_copy}/meta/tasks.jsonl: missing\n"


def test_check_reports_a_bad_jsonl_line(broken_copy, capsys):
    with open(broken_copy / "meta/tasks.jsonl", "a") as fh:
        fh.write("{not json\n")
    assert main(["data", "check", str(broken_copy)]) == 2
    assert "meta/tasks.jsonl: line 3 is not JSON" in capsys.readouterr().err


def test_check_of_a_file_or_a_missing_folder_says_which(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "loop").symlink_to("loop")  # was "missing"
    for name, what in (
        ("notes.txt", "a file"),
        ("gone", "missing"),
        ("loop", "a link to nothing, or a loop of links"),
    ):
        assert main(["data", "check", str(tmp_path / name)]) == 2
        assert capsys.readouterr().err == (
            f"autotune: error: {tmp_path / name}: not a dataset folder ({what}); "
            "give the folder lerobot wrote\n"
        )


PARQUET = "data/chunk-000/episode_000001.parquet"
FRONT = "videos/chunk-000/observation.images.front/episode_000000.mp4"


def _fifo(path):
    os.mkfifo(path)


def _folder(path):
    path.mkdir()


def _loop(path):
    path.symlink_to(path.name)


def _dangling(path):
    path.symlink_to("/nonexistent/x")


@pytest.mark.parametrize(
    ("name", "make", "what"),
    [
        (PARQUET, _fifo, "is a named pipe (FIFO), not a file"),
        (PARQUET, _loop, "cannot be read (Too many levels of symbolic links)"),
        (FRONT, _folder, "is a folder, not a file"),
        (FRONT, _dangling, "a link to /nonexistent/x, which does not exist"),
        ("meta/modality.json", _fifo, "is a named pipe (FIFO), not a file"),
        ("meta/tokenizer.json", _folder, "is a folder, not a file"),
    ],
    ids=["fifo-parquet", "loop-parquet", "folder-video", "dangling-video", "fifo-modality", "folder-tokenizer"],
)  # fmt: skip
def test_check_says_what_stands_where_a_file_should_be(broken_copy, capsys, name, make, what):
    """A pipe, a folder or a broken link was "missing" (or, for modality.json, quietly replaced by
    an inferred mapping)."""
    path = broken_copy / name
    path.unlink()
    make(path)
    assert main(["data", "check", str(broken_copy)]) == 2
    assert capsys.readouterr().err == f"autotune: error: {path}: {what}\n"


def _set_column(path, name, values, kind=None):
    table = pq.read_table(path)
    i = table.schema.get_field_index(name)
    pq.write_table(table.set_column(i, name, pa.array(values, kind)), path)


@pytest.mark.parametrize(
    ("column", "values", "what"),
    [
        ("observation.state", lambda n: [[0.5] * 3] * n, "column 'observation.state' has 3 values per row; "
         "meta/info.json's features.observation.state.shape says 8"),
        ("observation.state", lambda n: [[0.5] * 100] * n, "column 'observation.state' has 100 values per "
         "row; meta/info.json's features.observation.state.shape says 8"),
        ("action", lambda n: [[0.5] * 8] * n, "column 'action' has 8 values per row; meta/info.json's "
         "features.action.shape says 7"),
        ("action", lambda n: [[0.0] * 6 + [float("nan")]] * n, "column 'action' holds nan at row 0 (value 6); "
         "allowed: finite numbers"),
        ("observation.state", lambda n: [[float("inf")] * 8] * n, "column 'observation.state' holds inf at row 0 "
         "(value 0); allowed: finite numbers"),
        ("observation.state", lambda n: [[[0.5] * 8]] * n, "column 'observation.state' has type "
         "list<element: list<element: double>>; expected a list of floats per row"),
        ("action", lambda n: [["0.5"] * 7] * n, "column 'action' has type list<element: string>; "
         "expected a list of floats per row"),
    ],
    ids=["short-rows", "wide-rows", "wide-action", "nan-action", "inf-state", "nested-lists", "strings"],
)  # fmt: skip
def test_check_refuses_vectors_not_as_wide_as_declared_or_not_finite(
    broken_copy, capsys, column, values, what
):
    """Each passed as OK: a short row was sliced to fewer dims, a wide one to the declared ones
    (100 values against [8]), a NaN went on to the loss; lists of lists or of strings were a
    ValueError traceback from numpy."""
    path = broken_copy / PARQUET
    _set_column(path, column, values(pq.read_metadata(path).num_rows))
    assert main(["data", "check", str(broken_copy)]) == 2
    assert capsys.readouterr().err == f"autotune: error: {path}: {what}\n"


@pytest.mark.parametrize(
    ("values", "kind", "what"),
    [
        (lambda n: [float("nan")] * n, pa.float32(), "episode 1 frame 0 has timestamp nan, not 0.000000 at 20 fps"),
        (lambda n: [f"{i / 20}" for i in range(n)], pa.string(),
         "column 'timestamp' has type string or nulls; expected seconds (numbers)"),
    ],
    ids=["nan", "strings"],
)  # fmt: skip
def test_check_refuses_timestamps_that_are_nan_or_not_numbers(
    broken_copy, capsys, values, kind, what
):
    """Both passed: NaN is never greater than the tolerance, and numeric strings cast to floats."""
    path = broken_copy / PARQUET
    _set_column(path, "timestamp", values(pq.read_metadata(path).num_rows), kind)
    assert main(["data", "check", str(broken_copy)]) == 2
    assert capsys.readouterr().err == f"autotune: error: {path}: {what}\n"


def test_check_refuses_an_embodiment_id_training_refuses(broken_copy, capsys):
    """info.json's embodiment id past GR00T's 32 projector slots: check said OK, training refused it."""
    info = broken_copy / "meta/info.json"
    data = json.loads(info.read_text())
    data["embodiment"] = {"tag": "new_embodiment", "id": 40}
    info.write_text(json.dumps(data))
    assert main(["data", "check", str(broken_copy)]) == 2
    assert capsys.readouterr().err == (
        f"autotune: error: {info}: embodiment.id 40 is not a projector slot of GR00T N1.6 or N1.7; "
        "allowed: 0 to 31\n"
    )


def test_check_refuses_a_column_named_twice(broken_copy, capsys):
    """A data file with two 'action' columns was a KeyError traceback from pyarrow, in check and
    in training alike."""
    path = broken_copy / PARQUET
    table = pq.read_table(path)
    pq.write_table(table.append_column("action", table.column("action")), path)
    assert main(["data", "check", str(broken_copy)]) == 2
    assert capsys.readouterr().err == (
        f"autotune: error: {path}: column 'action' appears 2 times; allowed: one column of each name\n"
    )
