"""LeRobot v2.0, v2.1 and v3.0 as the lerobot library lays them out: index, stats, modality, errors.

The datasets are written by ``data make`` (lerobot itself does not install beside this torch: every
0.4.x pins torch < 2.11, and the 0.3.x a resolver falls back to needs torchvision, whose wheel does
not import beside the CPU torch). Their layout is checked here against lerobot's own: the info.json
keys are those of lerobot 0.4.4's ``create_empty_dataset_info`` (v3.0) and 0.3.3's (v2.1), the
episode-index columns those its ``save_episode`` writes. ``tests/data/lerobot_interop.py`` writes
and reads datasets with lerobot itself in a scratch environment, for a cross-check by hand.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from autotune.cli import main
from autotune.data import LeRobotDataset, MakeSpec, ReadSpec, load_meta, make_dataset
from autotune.data.content import FrameRenderer, rng_for
from autotune.errors import DataError

# meta/episodes/chunk-000/file-000.parquet of a 2-camera dataset written by lerobot 0.4.4
# (LeRobotDataset.create / add_frame / save_episode), stats columns left out.
V3_EPISODE_COLUMNS = ["episode_index", "tasks", "length", "data/chunk_index", "data/file_index",
                      "dataset_from_index", "dataset_to_index"] + [
    f"videos/observation.images.{v}/{c}" for v in ("front", "wrist")
    for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")] + [
    "meta/episodes/chunk_index", "meta/episodes/file_index"]  # fmt: skip
V3_INFO_KEYS = {"codebase_version", "robot_type", "total_episodes", "total_frames", "total_tasks", "chunks_size",
                "data_files_size_in_mb", "video_files_size_in_mb", "fps", "splits", "data_path", "video_path",
                "features"}  # fmt: skip
V21_INFO_KEYS = {"codebase_version", "robot_type", "total_episodes", "total_frames", "total_tasks", "total_videos",
                 "total_chunks", "chunks_size", "fps", "splits", "data_path", "video_path", "features"}  # fmt: skip
SPEC = ReadSpec(views=2, image_size=32, state_dim=16, action_dim=16, action_horizon=4)


def made(tmp_path_factory, name: str, **spec) -> object:
    base = {
        "episodes": 3,
        "views": 2,
        "size": 48,
        "width": 64,
        "frames": 12,
        "fps": 10,
        "codec": "av1",
        "extras": False,
    }
    return make_dataset(tmp_path_factory.mktemp(name) / "ds", MakeSpec(**{**base, **spec}))


@pytest.fixture(scope="session")
def v3_av1(tmp_path_factory):
    """As lerobot 0.4 writes it: v3.0, AV1, no modality.json."""
    return made(tmp_path_factory, "v3", format="v3.0")


@pytest.fixture(scope="session")
def v21_av1(tmp_path_factory):
    """The same episodes as lerobot 0.3 writes them: v2.1, AV1, no modality.json."""
    return made(tmp_path_factory, "v21", format="v2.1")


@pytest.fixture
def v3_copy(v3_av1, tmp_path):
    return shutil.copytree(v3_av1, tmp_path / "v3")


def test_v3_layout_is_lerobots(v3_av1):
    info = json.loads((v3_av1 / "meta/info.json").read_text())
    assert set(info) == V3_INFO_KEYS and info["codebase_version"] == "v3.0"
    assert info["features"]["observation.images.front"]["info"]["video.codec"] == "av1"
    index = pq.read_table(v3_av1 / "meta/episodes/chunk-000/file-000.parquet")
    assert [c for c in index.column_names if not c.startswith("stats/")] == V3_EPISODE_COLUMNS
    assert {"stats/observation.state/mean", "stats/action/count"} <= set(index.column_names)
    assert sorted(p.relative_to(v3_av1).as_posix() for p in v3_av1.rglob("*") if p.is_file()) == [
        "data/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-000.parquet", "meta/info.json",
        "meta/stats.json", "meta/tasks.parquet", "videos/observation.images.front/chunk-000/file-000.mp4",
        "videos/observation.images.wrist/chunk-000/file-000.mp4"]  # fmt: skip
    assert pq.ParquetFile(v3_av1 / "data/chunk-000/file-000.parquet").metadata.num_row_groups == 3


def test_v21_layout_is_lerobots(v21_av1):
    info = json.loads((v21_av1 / "meta/info.json").read_text())
    assert set(info) == V21_INFO_KEYS and info["codebase_version"] == "v2.1"
    assert (
        not (v21_av1 / "meta/stats.json").exists() and not (v21_av1 / "meta/modality.json").exists()
    )
    row = json.loads((v21_av1 / "meta/episodes_stats.jsonl").read_text().splitlines()[1])
    assert row["episode_index"] == 1 and row["stats"]["observation.state"]["count"] == [12]


def test_v3_index_locates_each_episode_in_shared_files(v3_av1):
    meta = load_meta(v3_av1)
    assert meta.version == "v3.0" and [e.first_row for e in meta.episodes] == [0, 12, 24]
    assert [e.videos["observation.images.wrist"].first_frame for e in meta.episodes] == [0, 12, 24]
    assert len({e.data_file for e in meta.episodes}) == 1
    assert meta.modality.inferred and meta.video_shapes["observation.images.front"] == (48, 64, 3)
    assert meta.notices == [f"{v3_av1}/meta/modality.json: missing; inferred from meta/info.json: state 8 dims "
                            "(observation.state), action 7 dims (action), views front, wrist, the task as the "
                            f"instruction (`autotune data modality {v3_av1} --write` writes it)"]  # fmt: skip


def test_a_v3_frame_is_the_episodes_frame(v3_av1, v21_av1):
    """Frame 5 of episode 2 decodes, in both layouts, to the frame rendered for (episode 2, frame 5)."""
    truth = {}
    for ep in range(3):
        renderer = FrameRenderer(
            (48, 64), 12, rng_for(0, 5, ep, 1)
        )  # make.py's stream of (episode, wrist)
        truth |= {(ep, i): renderer.frame(i).astype(float) for i in range(12)}
    for root in (v3_av1, v21_av1):
        got = LeRobotDataset(root, SPEC).read_frames(2, 5)[1].permute(1, 2, 0).numpy().astype(float)
        nearest = min(truth, key=lambda k: np.abs(truth[k] - got).mean())
        assert nearest == (2, 5), root


def test_stats_aggregated_from_episodes_match_the_whole(v3_copy, v21_av1):
    stats_json = load_meta(v3_copy).stats
    (v3_copy / "meta/stats.json").unlink()
    from_index = load_meta(v3_copy).stats  # v3.0: the stats/ columns of the episode index
    from_jsonl = load_meta(v21_av1).stats  # v2.1: meta/episodes_stats.jsonl
    table = pq.read_table(v3_copy / "data/chunk-000/file-000.parquet")
    state = np.stack(table.column("observation.state").to_numpy(zero_copy_only=False)).astype(
        np.float64
    )
    for stats in (stats_json, from_index, from_jsonl):
        s = stats["observation.state"]
        np.testing.assert_allclose(s["mean"], state.mean(0), atol=1e-6)
        np.testing.assert_allclose(s["std"], state.std(0), atol=1e-6)
        np.testing.assert_allclose(s["min"], state.min(0), atol=1e-6)


def test_v20_reads_its_stats_json(v21_av1, tmp_path):
    root = shutil.copytree(v21_av1, tmp_path / "v20")
    info = json.loads((root / "meta/info.json").read_text())
    (root / "meta/info.json").write_text(json.dumps({**info, "codebase_version": "v2.0"}))
    with pytest.raises(DataError, match=r"v20/meta/stats\.json: missing"):
        load_meta(root)
    stats = {k: {n: v.tolist() for n, v in s.items()} for k, s in load_meta(v21_av1).stats.items()}
    (root / "meta/stats.json").write_text(json.dumps(stats))
    (root / "meta/episodes_stats.jsonl").unlink()
    assert load_meta(root).version == "v2.0" and len(LeRobotDataset(root, SPEC)) == 36


# 1e-4 MB: more than an open mp4's header on disk, less than an episode's encoded frames
@pytest.mark.parametrize("file_mb", [1e-6, 1e-4])
def test_v3_with_a_file_per_episode(tmp_path_factory, file_mb):
    root = made(tmp_path_factory, "split", format="v3.0", views=1, codec="h264", file_mb=file_mb)
    meta = load_meta(root)
    assert [e.data_file.name for e in meta.episodes] == [
        "file-000.parquet",
        "file-001.parquet",
        "file-002.parquet",
    ]
    assert [e.first_row for e in meta.episodes] == [0, 0, 0]
    assert [e.videos["observation.images.front"].first_frame for e in meta.episodes] == [0, 0, 0]
    assert LeRobotDataset(root, ReadSpec(1, 32, 8, 7, 4)).sample(2, 11)["state"].shape == (8,)


def test_modality_is_printed_and_written(v3_copy, capsys):
    assert main(["data", "modality", str(v3_copy)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["state"] == {"state": {"start": 0, "end": 8, "original_key": "observation.state",
                                          "normalization": "min_max"}}  # fmt: skip
    assert list(printed["video"]) == ["front", "wrist"]
    assert main(["data", "modality", str(v3_copy), "--write"]) == 0
    assert json.loads((v3_copy / "meta/modality.json").read_text()) == printed
    meta = load_meta(v3_copy)
    assert not meta.modality.inferred and not meta.notices
    assert main(["data", "modality", str(v3_copy), "--write"]) == 2
    assert "meta/modality.json: exists; pass --force to replace it" in capsys.readouterr().err


@pytest.mark.parametrize("broken", ["{not json", '{"state": 5}'], ids=["not-json", "wrong-shape"])
def test_write_force_replaces_a_broken_modality_json_with_the_inferred_one(v3_copy, capsys, broken):
    """The command that writes the file refused to, reading the broken file it was to replace."""
    path = v3_copy / "meta/modality.json"
    assert main(["data", "modality", str(v3_copy)]) == 0
    inferred = json.loads(capsys.readouterr().out)
    path.write_text(broken)
    assert main(["data", "modality", str(v3_copy), "--write"]) == 2
    assert main(["data", "modality", str(v3_copy), "--write", "--force"]) == 0
    assert json.loads(path.read_text()) == inferred
    path.unlink()
    path.mkdir()
    capsys.readouterr()
    assert main(["data", "modality", str(v3_copy), "--write", "--force"]) == 2
    assert capsys.readouterr().err == (
        f"autotune: error: {path}: is a folder; --force replaces a file, never a folder\n"
    )


def test_modality_json_as_isaac_gr00t_writes_it(v3_copy):
    """Sub-keys by name with start/end (original_key defaulted), views in file order, the
    annotation's column; the vector is the sub-keys concatenated, each normalised on its own."""
    modality = {
        "state": {
            "arm": {"start": 0, "end": 5, "absolute": True},
            "gripper": {"start": 7, "end": 8},
        },
        "action": {
            "arm": {"start": 0, "end": 6, "original_key": "action", "normalization": "mean_std"}
        },
        "video": {"wrist": {"original_key": "observation.images.wrist"}},
        "annotation": {"human.task_description": {"original_key": "task_index"}},
    }
    (v3_copy / "meta/modality.json").write_text(json.dumps(modality))
    meta = load_meta(v3_copy)
    assert (meta.state_dim, meta.action_dim, meta.video_keys) == (
        6,
        6,
        ["observation.images.wrist"],
    )
    ds = LeRobotDataset(meta, ReadSpec(1, 32, 8, 8, 4))
    raw = (
        pq.read_table(v3_copy / "data/chunk-000/file-000.parquet")
        .column("observation.state")
        .to_pylist()[12]
    )
    lo, hi = meta.stats["observation.state"]["min"], meta.stats["observation.state"]["max"]
    expected = [2 * (raw[i] - lo[i]) / (hi[i] - lo[i]) - 1 for i in (0, 1, 2, 3, 4, 7)]
    sample = ds.sample(1, 0)
    assert sample["state"][:6].tolist() == pytest.approx(expected, abs=1e-5)
    assert sample["state_mask"].tolist() == [True] * 6 + [False] * 2
    assert (
        sample["action"][0, :6].abs().max() > 0
        and sample["action_mask"][0].tolist() == [True] * 6 + [False] * 2
    )


@pytest.mark.parametrize(
    "modality, message",
    [({"state": {"a": {"start": 0, "end": 9}}}, r"state\.a spans \[0, 9\); observation\.state has 8 columns"),
     ({"video": {"top": {}}}, r"video\.top: 'observation\.images\.top' is not a video feature"),
     ({"state": {"a": {"start": 0, "end": 2, "original_key": "observation.eef"}}},
      r"state\.a\.original_key 'observation\.eef' is not a feature of meta/info\.json"),
     ({"action": {"a": {"start": 0, "end": 2, "normalization": "robust"}}}, r"action\.a\.normalization 'robust' is not one of"),
     ({"state_keys": {}}, r"unknown key 'state_keys'; allowed: \['state', 'action', 'video', 'annotation'\]")],
)  # fmt: skip
def test_a_bad_modality_json_is_one_line_naming_the_key(v3_copy, modality, message):
    good = {"state": {"s": {"start": 0, "end": 8}}, "action": {"a": {"start": 0, "end": 7}},
            "video": {"front": {"original_key": "observation.images.front"}}}  # fmt: skip
    (v3_copy / "meta/modality.json").write_text(json.dumps({**good, **modality}))
    with pytest.raises(DataError, match=f"{v3_copy}/meta/modality\\.json: {message}"):
        load_meta(v3_copy)


def test_corrupt_v3_episode_index_is_one_line_naming_the_file(v3_copy, capsys):
    index = v3_copy / "meta/episodes/chunk-000/file-000.parquet"
    index.write_bytes(b"PAR1" + index.read_bytes()[100:])
    assert main(["data", "check", str(v3_copy)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"autotune: error: {index}: not a readable parquet file")
        and err.count("\n") == 1
    )


def test_v3_episode_index_without_a_column_names_it(v3_copy, capsys):
    index = v3_copy / "meta/episodes/chunk-000/file-000.parquet"
    pq.write_table(
        pq.read_table(index).drop_columns(["videos/observation.images.wrist/from_timestamp"]), index
    )
    assert main(["data", "check", str(v3_copy)]) == 2
    assert (
        f"{index}: missing column 'videos/observation.images.wrist/from_timestamp'"
        in capsys.readouterr().err
    )


def test_v3_episode_index_out_of_step_with_the_data(v3_copy):
    index = v3_copy / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(index)
    from_index = table.column("dataset_from_index").to_pylist()
    pq.write_table(table.set_column(table.column_names.index("dataset_from_index"), "dataset_from_index",
                                    [[from_index[0], from_index[1] + 1, from_index[2]]]), index)  # fmt: skip
    with pytest.raises(
        DataError, match=rf"{index}: episode 1: expected episode 1 with length >= 1"
    ):
        load_meta(v3_copy)


def test_v3_episodes_sharing_frames_of_a_video_are_refused(v3_copy, capsys):
    """Episode 2's front view points at episode 1's frames, which would train as episode 2's."""
    index = v3_copy / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(index)
    for end in ("from", "to"):
        column = f"videos/observation.images.front/{end}_timestamp"
        values = table.column(column).to_pylist()
        table = table.set_column(
            table.column_names.index(column), column, [values[:2] + values[1:2]]
        )
    pq.write_table(table, index)
    assert main(["data", "check", str(v3_copy)]) == 2
    video = v3_copy / "videos/observation.images.front/chunk-000/file-000.mp4"
    assert capsys.readouterr().err == (
        f"autotune: error: {index}: episode 2: its frames [12, 24) of {video} are episode 1's too; "
        "allowed: episodes whose frames of a video file do not overlap\n"
    )


def test_corrupt_v3_video_is_one_line_naming_the_file(v3_copy, capsys):
    video = v3_copy / "videos/observation.images.front/chunk-000/file-000.mp4"
    video.write_bytes(video.read_bytes()[: video.stat().st_size * 2 // 3])
    assert main(["data", "check", str(v3_copy)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"autotune: error: {video}: ") and err.count("\n") == 1
    with pytest.raises(DataError, match=rf"{video}: frame 35 not found"):
        LeRobotDataset(v3_copy, SPEC).sample(2, 11)


def test_unsupported_version_and_template(v3_copy):
    info_path = v3_copy / "meta/info.json"
    info = json.loads(info_path.read_text())
    info_path.write_text(json.dumps({**info, "codebase_version": "v1.6"}))
    with pytest.raises(
        DataError,
        match=r"codebase_version 'v1\.6' is not supported; supported: \['v2\.0', 'v2\.1', 'v3\.0'\]",
    ):
        load_meta(v3_copy)
    info_path.write_text(
        json.dumps({**info, "data_path": "data/{episode_chunk:03d}/{episode_index}.parquet"})
    )
    with pytest.raises(
        DataError,
        match=r"data_path .* has placeholder 'episode_chunk'; this codebase version allows",
    ):
        load_meta(v3_copy)


@pytest.mark.parametrize(
    "edit, what",
    [
        (lambda info: '["v3.0"]', "the file is a list of 1 item"),
        (
            lambda info: '"localhost:5432:*:lerobot:hunter2x"',
            "the file is a string of 33 characters",
        ),
    ],
    ids=["list", "credentials-line"],
)
def test_an_info_json_of_another_shape_is_named_by_its_kind(v3_copy, edit, what):
    """A meta file handed over in another shape: named by what it is, its content never echoed."""
    info_path = v3_copy / "meta/info.json"
    info_path.write_text(edit(json.loads(info_path.read_text())))
    with pytest.raises(DataError, match=rf"{info_path}: {what}, not a JSON object") as err:
        load_meta(v3_copy)
    assert "hunter2x" not in str(err.value)


def test_check_reports_what_it_found(v3_av1, capsys):
    assert main(["data", "check", str(v3_av1)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"OK {v3_av1}: LeRobot v3.0, 3 episodes, 36 frames at 10 fps, 2 tasks (10 words); "
                          "2 views: front 64x48 av1 (libdav1d); wrist 64x48 av1 (libdav1d); state 8 / action 7 "
                          "dims (modality: inferred); embodiment new_embodiment; 1 data files, 2 video files, ")  # fmt: skip
    assert out.endswith(" MiB\n") and out.count("\n") == 1
    assert err.startswith("autotune: note: ") and "modality.json: missing; inferred" in err


def test_a_same_seed_v3_dataset_has_the_same_bytes(v3_av1, tmp_path_factory):
    again = made(tmp_path_factory, "again", format="v3.0")
    for rel in (
        "data/chunk-000/file-000.parquet",
        "meta/episodes/chunk-000/file-000.parquet",
        "meta/tasks.parquet",
    ):
        assert (again / rel).read_bytes() == (v3_av1 / rel).read_bytes(), rel
    frames = [LeRobotDataset(r, SPEC).read_frames(1, 3)[0] for r in (v3_av1, again)]
    assert torch.equal(*frames)


def test_v3_batches_are_the_same_from_workers(v3_av1):
    """Workers open the shared files themselves (readers are per process) and make the same batches."""
    from autotune.config import DataConfig
    from autotune.data import build_host_loader

    ds = LeRobotDataset(v3_av1, SPEC)

    def first(workers: int) -> dict:
        data = DataConfig(
            dataset=str(v3_av1), num_workers=workers, persistent_workers=False, pin_memory=False
        )
        batch = next(iter(build_host_loader(ds, data, 4, seed=3)))
        return {k: v for k, v in batch.items() if k != "load_s"}

    main_process, workers = first(0), first(2)
    assert all(torch.equal(main_process[k], workers[k]) for k in main_process)
