"""``data make``: the LeRobot v2.1 layout as lerobot 0.3 writes it, real inter-frame video, determinism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autotune.cli import main
from autotune.data import MakeSpec, load_meta, make_dataset
from autotune.data.writers import COLUMNS
from autotune.errors import DataError
from autotune.workloads.gr00t_n16.presets import NUM_SPECIAL_TOKENS
from tests.tmpfs import small_disk

VIDEO = "videos/chunk-000/observation.images.{view}/episode_{ep:06d}.mp4"


def decoded(path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


META_FILES = (
    "info.json",
    "episodes.jsonl",
    "tasks.jsonl",
    "episodes_stats.jsonl",
    "modality.json",
    "tokenizer.json",
)


def test_layout_and_meta(tiny_dataset):
    for name in META_FILES:
        assert (tiny_dataset / "meta" / name).is_file(), name
    assert not (
        tiny_dataset / "meta/stats.json"
    ).exists()  # lerobot 0.3 (v2.1) writes per-episode stats only
    info = json.loads((tiny_dataset / "meta/info.json").read_text())
    assert info["codebase_version"] == "v2.1" and info["total_videos"] == 6
    assert info["total_episodes"] == 3 and info["total_frames"] == 180
    assert info["features"]["observation.images.front"]["shape"] == [64, 64, 3]
    meta = load_meta(tiny_dataset)
    assert [e.length for e in meta.episodes] == [60, 60, 60]
    assert meta.video_keys == ["observation.images.front", "observation.images.wrist"]
    assert all(task.endswith(".") and task[0].isupper() for task in meta.tasks.values())
    rows = [
        json.loads(line)
        for line in (tiny_dataset / "meta/episodes_stats.jsonl").read_text().splitlines()
    ]
    assert [r["episode_index"] for r in rows] == [0, 1, 2]
    assert set(rows[0]["stats"]["action"]) == {"mean", "std", "min", "max", "count"}
    vocab = json.loads((tiny_dataset / "meta/tokenizer.json").read_text())["vocab"]
    assert min(vocab.values()) == NUM_SPECIAL_TOKENS and "the" in vocab


def test_parquet_columns(tiny_dataset):
    table = pq.read_table(tiny_dataset / "data/chunk-000/episode_000001.parquet")
    assert tuple(table.column_names) == COLUMNS
    assert table.schema.field("action").type == pa.list_(pa.float32(), 7)  # fixed size, as lerobot
    assert table.column("index").to_pylist()[0] == 60  # global index continues across episodes
    assert table.column("frame_index").to_pylist() == list(range(60))


def test_video_is_inter_coded_with_a_30_frame_gop(tiny_dataset):
    with av.open(str(tiny_dataset / VIDEO.format(view="wrist", ep=0))) as c:
        stream = c.streams.video[0]
        assert stream.codec_context.name in ("h264", "mpeg4")
        keys = [i for i, f in enumerate(c.decode(stream)) if f.key_frame]
    assert keys == [0, 30]


def test_moving_content(tiny_dataset):
    frames = decoded(tiny_dataset / VIDEO.format(view="front", ep=0))
    assert len(frames) == 60
    assert frames[0].std() > 10  # not a flat colour
    assert np.abs(frames[0].astype(int) - frames[20]).mean() > 3  # things move


def test_same_seed_same_bytes_and_frames(tiny_dataset, tmp_path):
    again = make_dataset(tmp_path / "again", MakeSpec(episodes=3, size=64, seed=0, frames=60))
    other = make_dataset(tmp_path / "other", MakeSpec(episodes=3, size=64, seed=1, frames=60))
    rel = "data/chunk-000/episode_000002.parquet"
    assert (again / rel).read_bytes() == (tiny_dataset / rel).read_bytes()
    assert (other / rel).read_bytes() != (tiny_dataset / rel).read_bytes()
    video = VIDEO.format(view="wrist", ep=2)
    assert all(
        np.array_equal(a, b) for a, b in zip(decoded(again / video), decoded(tiny_dataset / video))
    )
    assert not np.array_equal(decoded(other / video)[5], decoded(tiny_dataset / video)[5])


def test_default_lengths_and_other_embodiment(tmp_path):
    root = make_dataset(
        tmp_path / "gr1", MakeSpec(episodes=2, views=1, size=32, embodiment="gr1", embodiment_id=7)
    )
    meta = load_meta(root)
    assert all(60 <= e.length <= 150 for e in meta.episodes)
    assert (meta.state_dim, meta.action_dim, meta.embodiment_id) == (29, 29, 7)


def test_refuses_bad_arguments_and_existing_folders(tiny_dataset):
    with pytest.raises(DataError, match="--size 63 is not allowed"):
        MakeSpec(episodes=1, size=63)
    with pytest.raises(DataError, match="--embodiment 'dog'"):
        MakeSpec(episodes=1, embodiment="dog")
    with pytest.raises(DataError, match="exists and is not empty; pass --force"):
        make_dataset(tiny_dataset, MakeSpec(episodes=1, size=32, frames=10))


def test_an_embodiment_id_past_the_projector_slots_is_refused_before_the_folder(tmp_path, capsys):
    """--embodiment-id 999999999999 made a dataset that data check called OK and that every GR00T
    preset refused when it trained ('embodiment id 999999999999 is not in [0, 32)')."""
    out = tmp_path / "d"
    assert main(["data", "make", str(out), "--episodes", "1", "--embodiment-id", "32"]) == 2
    assert capsys.readouterr().err.strip() == (
        "autotune: error: data make: --embodiment-id 32 is not allowed; allowed: 0 to 31 (a "
        "projector slot of GR00T N1.6 and N1.7)"
    )
    assert not out.exists()


def test_the_slots_data_make_allows_are_the_models():
    from autotune.data.content import PROJECTOR_SLOTS
    from autotune.workloads.gr00t_n16.presets import PRESETS as N16
    from autotune.workloads.gr00t_n17.presets import PRESETS as N17

    assert {p.num_embodiments for p in [*N16.values(), *N17.values()]} == {PROJECTOR_SLOTS}


def test_encoding_av1_leaves_the_callers_scheduling_as_it_was(tmp_path):
    """SVT-AV1 run as root moves the thread that starts it to SCHED_FIFO 99 (CI runs as root: a busy
    process started after it held both cores for minutes); each call into the encoder puts it back."""
    from autotune.data.encode import VideoWriter, encoder_for

    if "libsvtav1" not in av.codecs_available:
        pytest.skip("this PyAV has no libsvtav1")
    before = (os.sched_getscheduler(0), os.sched_getparam(0))
    writer = VideoWriter(tmp_path / "a.mp4", encoder_for("av1"), 10, 48, 64)
    writer.add_episode([np.full((48, 64, 3), 40 * i, np.uint8) for i in range(4)])
    assert (os.sched_getscheduler(0), os.sched_getparam(0)) == before
    writer.close()
    assert (os.sched_getscheduler(0), os.sched_getparam(0)) == before
    assert len(decoded(tmp_path / "a.mp4")) == 4


SMALL = MakeSpec(episodes=1, views=1, size=16, frames=2)


def test_force_never_replaces_a_folder_that_is_not_a_dataset(tmp_path, monkeypatch, capsys):
    """`data make . --force` in a folder of one's own files deleted them all (and made nothing)."""
    mine = tmp_path / "mine"
    (mine / "notes").mkdir(parents=True)
    (mine / "notes/a.txt").write_text("keep\n")
    monkeypatch.chdir(mine)
    for target in (".", str(mine), f"{mine}/notes/.."):
        assert main(["data", "make", target, "--episodes", "1", "--size", "16", "--force"]) == 2
        assert capsys.readouterr().err == (
            f"autotune: error: {mine}: holds files and no meta/info.json, so it is not a dataset; "
            "--force replaces a dataset folder, never another folder (give a new or empty folder)\n"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    assert (mine / "notes/a.txt").read_text() == "keep\n"


def test_force_replaces_a_dataset_but_not_the_current_folder_nor_a_links_target(
    tmp_path, monkeypatch
):
    ds = make_dataset(tmp_path / "ds", SMALL)
    monkeypatch.chdir(ds / "meta")
    with pytest.raises(DataError, match=rf"^{ds}: is the current folder \(or holds it\)"):
        make_dataset("..", SMALL, force=True)
    monkeypatch.chdir(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(ds)
    before = (ds / "meta/info.json").read_text()
    make_dataset(link, MakeSpec(episodes=2, views=1, size=16, frames=2), force=True)
    assert not link.is_symlink() and len(load_meta(link).episodes) == 2
    assert (ds / "meta/info.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "link"]


def test_a_failed_replacement_puts_the_old_dataset_back(tmp_path, monkeypatch):
    ds = make_dataset(tmp_path / "ds", SMALL)
    before = (ds / "meta/info.json").read_text()
    real, calls = os.rename, []

    def rename(src, dst):  # the new dataset's move into place fails (a full disk's metadata)
        calls.append(src)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError):
        make_dataset(ds, MakeSpec(episodes=2, views=1, size=16, frames=2), force=True)
    assert (ds / "meta/info.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--episodes", "1000000000000"], "--episodes 1000000000000 is not allowed; allowed: 1 to 1000000"),
        (["--episodes", "1", "--frames", "1000000000"], "--frames 1000000000 is not allowed; allowed: 2 to 100000"),
    ],
    ids=["episodes", "frames"],
)  # fmt: skip
def test_sizes_past_any_dataset_are_refused_before_anything_is_drawn(
    tmp_path, capsys, flags, message
):
    """They were drawn in memory first: a MemoryError blamed on training memory, or the machine's
    memory taken."""
    assert main(["data", "make", str(tmp_path / "ds"), *flags]) == 2
    assert capsys.readouterr().err == f"autotune: error: data make: {message}\n"
    assert list(tmp_path.iterdir()) == []


def test_a_file_size_for_a_format_of_a_file_per_episode_is_refused(tmp_path, capsys):
    """v2.1 writes a file per episode: --file-mb was dropped without a word, the files not split."""
    assert main(["data", "make", str(tmp_path / "ds"), "--episodes", "1", "--file-mb", "5"]) == 2
    assert capsys.readouterr().err == (
        "autotune: error: data make: --file-mb with --format v2.1 is not allowed; allowed: "
        "--file-mb with --format v3.0 only\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_dataset_larger_than_its_disk_is_refused_after_its_first_episode(tmp_path, capsys):
    with small_disk(tmp_path / "disk", "2m") as disk:
        make = [
            "data",
            "make",
            str(disk / "ds"),
            "--episodes",
            "5000",
            "--frames",
            "10",
            "--size",
            "16",
        ]
        assert main(make) == 2
        err = capsys.readouterr().err
        assert err.startswith(
            f"autotune: error: {disk}: the dataset needs about 3"
        ) and err.endswith(
            "are free there; make fewer or shorter episodes, or give a folder on a larger disk\n"
        )
        assert list(disk.iterdir()) == []


def test_a_v3_dataset_larger_than_its_disk_is_refused_after_its_first_episode(tmp_path, capsys):
    """Its first episode's frames are still in the open video files' buffers: they count too."""
    with small_disk(tmp_path / "disk", "2m") as disk:
        make = ["data", "make", str(disk / "ds"), "--episodes", "100", "--frames", "20", "--size", "128",
                "--format", "v3.0"]  # fmt: skip
        assert main(make) == 2
        err = capsys.readouterr().err
        assert err.startswith(
            f"autotune: error: {disk}: the dataset needs about "
        ) and err.endswith(
            "are free there; make fewer or shorter episodes, or give a folder on a larger disk\n"
        )
        assert list(disk.iterdir()) == []


def test_a_dataset_that_fills_its_disk_is_one_line(tmp_path):
    """The disk fills as a v3.0 dataset is written (the room check passed; another writer took the
    room): the error line alone, no traceback of a data or video writer left open by the failure."""
    with small_disk(tmp_path / "disk", "2m") as disk:
        make = ["data", "make", str(disk / "ds"), "--episodes", "100", "--frames", "20", "--size", "128",
                "--format", "v3.0"]  # fmt: skip
        code = ("import sys; from autotune.data import make; make._check_room = lambda *a: None; "
                f"from autotune.cli import main; sys.exit(main({make!r}))")  # fmt: skip
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert (done.returncode, done.stderr) == (
            2, f"autotune: error: {disk / 'ds'}: cannot write the dataset (No space left on device)\n"
        )  # fmt: skip
        assert list(disk.iterdir()) == []


@pytest.mark.parametrize("cache", ["file", "/dev/null"])
def test_a_cache_variable_naming_no_folder_is_one_line_naming_it(tmp_path, monkeypatch, cache):
    """It was NotADirectoryError: [Errno 20] Not a directory: '/dev/null/datasets'."""
    from autotune.data.cache import cached_dataset

    if cache == "file":
        cache = tmp_path / "file"
        cache.write_text("x")
    monkeypatch.setenv("AUTOTUNE_CACHE", str(cache))
    with pytest.raises(DataError) as caught:
        cached_dataset(SMALL)
    assert str(caught.value) == (
        f"$AUTOTUNE_CACHE {cache}: cannot make {cache}/datasets (Not a directory); set "
        "AUTOTUNE_CACHE to a folder you can write"
    )


def test_a_dataset_that_cannot_be_written_is_named_not_its_temporary_folder(
    tmp_path, capsys, monkeypatch
):
    """The line named a file inside the hidden temporary folder (gone by the time it was read)."""
    import autotune.data.make as make

    def full(root, spec):
        raise OSError(
            28, "No space left on device", str(root / "data/chunk-000/episode_000000.parquet")
        )

    monkeypatch.setattr(make, "write_dataset", full)
    target = tmp_path / "ds"
    assert main(["data", "make", str(target), "--episodes", "1"]) == 2
    assert capsys.readouterr().err == (
        f"autotune: error: {target}: cannot write the dataset (No space left on device)\n"
    )
    assert list(tmp_path.iterdir()) == []


CTRL_C_AT_ONCE = """
import os, signal, sys, threading, time
import psutil
from autotune.data import MakeSpec
from autotune.data.cache import cached_dataset

def interrupt_the_maker():
    me = psutil.Process()
    while True:
        for child in me.children():
            try:
                if "spawn" + "_main" in " ".join(child.cmdline()):  # not this script's own text
                    os.kill(child.pid, signal.SIGINT)
                    return
            except psutil.NoSuchProcess:
                pass

threading.Thread(target=interrupt_the_maker, daemon=True).start()
print(cached_dataset(MakeSpec(episodes=1, views=1, size=64, frames=8)))
"""


def test_a_ctrl_c_in_the_first_moments_of_the_dataset_maker_is_not_its_end(tmp_path):
    """SIGINT sent to the process making the cached dataset the moment it exists, in its interpreter's
    start-up: it makes the dataset and prints no traceback (the parent, which the terminal's Ctrl-C
    reaches too, decides whether it stops). In a process that had started no other, the spawn of
    the multiprocessing resource tracker unblocked SIGINT before the maker was started: it died of
    the signal, or printed a KeyboardInterrupt traceback from ``spawn_main``."""
    env = {**os.environ, "AUTOTUNE_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", CTRL_C_AT_ONCE], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert (Path(done.stdout.strip()) / "meta" / "info.json").is_file()
