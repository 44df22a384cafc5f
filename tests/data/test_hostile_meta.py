"""A dataset folder is data: its metadata may not send a read outside the folder, and metadata of
the wrong shape (deep nesting, non-string names, numbers past a float) is one line naming the file,
never a traceback."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autotune.cli import main
from autotune.data import MakeSpec, make_dataset
from tests.data.test_meta_bounds import EPISODES, INFO, _check_fails, _edit_info
from tests.tmpfs import fill, small_disk

MODALITY = "meta/modality.json"
STATS = "meta/episodes_stats.jsonl"
V3_INDEX = "meta/episodes/chunk-000/file-000.parquet"


@pytest.fixture(scope="module")
def tiny_v3(tmp_path_factory):
    spec = MakeSpec(episodes=2, views=1, size=32, seed=0, frames=10, format="v3.0")
    return make_dataset(tmp_path_factory.mktemp("v3") / "ds", spec)


@pytest.fixture
def broken_v3(tiny_v3, tmp_path):
    return shutil.copytree(tiny_v3, tmp_path / "ds3")


@pytest.mark.parametrize("template", ["/etc/passwd", "../../../../etc/passwd", "data/../../x"])
def test_a_data_path_out_of_the_folder_is_refused(broken_copy, capsys, template):
    _edit_info(broken_copy, data_path=template)
    _check_fails(
        broken_copy,
        capsys,
        f"{broken_copy / INFO}: data_path gives {template!r}, outside the dataset folder; "
        "allowed: a path inside it, relative to it",
    )


def test_a_video_key_that_climbs_out_of_the_folder_is_refused(broken_copy, capsys):
    info = json.loads((broken_copy / INFO).read_text())
    key = "observation.images.../../../../../etc"
    info["features"][key] = info["features"].pop("observation.images.front")
    (broken_copy / INFO).write_text(json.dumps(info))
    (broken_copy / MODALITY).unlink()
    _check_fails(
        broken_copy,
        capsys,
        f"{broken_copy / INFO}: video_path gives "
        f"'videos/chunk-000/{key}/episode_000000.mp4', outside the dataset folder; "
        "allowed: a path inside it, relative to it",
    )


def test_a_v3_video_path_out_of_the_folder_is_refused(broken_v3, capsys):
    _edit_info(broken_v3, video_path="/tmp/{video_key}/{chunk_index}-{file_index}.mp4")
    _check_fails(
        broken_v3,
        capsys,
        f"{broken_v3 / INFO}: video_path gives '/tmp/observation.images.front/0-0.mp4', outside "
        "the dataset folder; allowed: a path inside it, relative to it",
    )


def test_a_video_key_in_data_path_is_refused(broken_copy, capsys):
    _edit_info(broken_copy, data_path="data/{video_key}/{episode_index}.parquet")
    _check_fails(
        broken_copy,
        capsys,
        f"{broken_copy / INFO}: data_path 'data/{{video_key}}/{{episode_index}}.parquet' has "
        "placeholder 'video_key'; this codebase version allows ['episode_chunk', 'episode_index']",
    )


def test_metadata_nested_past_the_stack_is_refused(broken_copy, capsys):
    (broken_copy / EPISODES).write_text("[" * 100_000 + "]" * 100_000 + "\n")
    _check_fails(
        broken_copy,
        capsys,
        f"{broken_copy / EPISODES}: line 1 nests arrays or objects deeper than Python can parse",
    )


def test_an_integer_fps_beyond_a_float_is_refused(broken_copy, capsys):
    _edit_info(broken_copy, fps=10**400)
    _check_fails(
        broken_copy,
        capsys,
        f"{broken_copy / INFO}: fps is inf; allowed: a number from 0.001 to 1e+06",
    )


@pytest.mark.parametrize(
    "section, where", [("state", "state.eef_position."), ("video", "video.front.")]
)
def test_a_modality_original_key_that_is_not_a_name_is_refused(broken_copy, capsys, section, where):
    modality = json.loads((broken_copy / MODALITY).read_text())
    first = next(iter(modality[section]))
    modality[section][first]["original_key"] = ["observation.state"]
    (broken_copy / MODALITY).write_text(json.dumps(modality))
    _check_fails(
        broken_copy,
        capsys,
        f"{broken_copy / MODALITY}: {where}original_key is ['observation.state']; allowed: the "
        "name of a feature of meta/info.json",
    )


def test_an_episode_task_that_is_not_a_string_is_refused(broken_copy, capsys):
    rows = [json.loads(line) for line in (broken_copy / EPISODES).read_text().splitlines()]
    rows[0]["tasks"] = [["Stack the tray"]]
    (broken_copy / EPISODES).write_text("".join(json.dumps(r) + "\n" for r in rows))
    _check_fails(
        broken_copy,
        capsys,
        f"{broken_copy / EPISODES}: line 1: tasks is [['Stack the tray']]; allowed: a list of "
        "task strings",
    )


def test_episode_stats_whose_aggregate_overflows_are_refused(broken_copy, capsys):
    """Each episode's mean is finite, their count-weighted sum is not: every state would be NaN."""
    rows = [json.loads(line) for line in (broken_copy / STATS).read_text().splitlines()]
    for row in rows:
        stats = row["stats"]["observation.state"]
        stats["mean"] = stats["max"] = [1e308] * len(stats["mean"])
    (broken_copy / STATS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    _check_fails(
        broken_copy,
        capsys,
        f"{broken_copy / STATS}: observation.state.mean aggregated over the episodes is not finite "
        "(the episodes' stats or counts are too large); allowed: stats whose mean and variance a "
        "float64 holds",
    )


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_v3_timestamp_that_is_not_finite_is_refused(broken_v3, capsys, value):
    path = broken_v3 / V3_INDEX
    table = pq.read_table(path)
    column = "videos/observation.images.front/from_timestamp"
    at = table.schema.get_field_index(column)
    table = table.set_column(at, column, pa.array([value, 0.5], pa.float64()))
    pq.write_table(table, path)
    _check_fails(
        broken_v3,
        capsys,
        f"{path}: episode 0: videos/observation.images.front/* are not integer chunk/file indices "
        "and finite float timestamps",
    )


@pytest.fixture
def small_tmpfs(tmp_path):
    """A tmpfs of 64 KiB."""
    with small_disk(tmp_path / "tmpfs", "64k") as disk:
        yield disk


def test_modality_write_on_a_full_disk_leaves_no_temporary_file(broken_copy, small_tmpfs, capsys):
    root = small_tmpfs / "ds"
    shutil.copytree(broken_copy / "meta", root / "meta")  # all that `data modality` reads
    (root / MODALITY).unlink()
    fill(small_tmpfs)
    assert main(["data", "modality", str(root), "--write"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"autotune: error: --write {root / MODALITY}: cannot write the file (No space left on "
        "device); give a place you can write\n"
    )
    assert sorted(p.name for p in (root / "meta").iterdir()) == sorted(
        p.name for p in (broken_copy / "meta").iterdir() if p.name != "modality.json"
    )


def test_control_characters_of_a_path_are_shown_escaped(broken_copy, capsys):
    """An info.json's data_path holding a terminal's escape sequence (clear the screen) or a carriage
    return reached the error line as is: the terminal acted on it instead of showing it."""
    _edit_info(broken_copy, data_path="data/\x1b[2J\rok\u202e.parquet")
    assert main(["data", "check", str(broken_copy)]) == 2
    err = capsys.readouterr().err
    assert err == (f"autotune: error: {broken_copy}/data/\\x1b[2J\\rok\\u202e.parquet: missing\n")


def _rename_view(root, old: str, new: str) -> None:
    info = json.loads((root / INFO).read_text())
    info["features"][new] = info["features"].pop(old)
    (root / INFO).write_text(json.dumps(info))


@pytest.mark.parametrize(
    ("file", "edit", "where", "name"),
    [
        (INFO, lambda r: _rename_view(r, "observation.images.front", "observation.images.f\x1b[2J"),
         "a key of features", "observation.images.f\x1b[2J"),
        (INFO, lambda r: _edit_info(r, embodiment={"tag": "panda\r", "id": 1}), "embodiment.tag", "panda\r"),
        (MODALITY, lambda r: (r / MODALITY).write_text(json.dumps(
            {**json.loads((r / MODALITY).read_text()),
             "video": {"fr\x1b]0;owned\x07": {"original_key": "observation.images.front"}}})),
         "a key of video", "fr\x1b]0;owned\x07"),
    ],
    ids=["view", "embodiment", "modality-view"],
)  # fmt: skip
def test_a_name_holding_a_control_character_is_refused(
    broken_copy, capsys, file, edit, where, name
):
    """A view or tag holding an escape sequence was printed as is by data check's summary, its
    modality note and run's data line: the terminal acted on it."""
    edit(broken_copy)
    _check_fails(
        broken_copy,
        capsys,
        f"{broken_copy / file}: {where} is {name!r}, which holds a control character; "
        "allowed: printable text",
    )
