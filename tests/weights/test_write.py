"""``write_checkpoint``: the shards and the index land in the folder given, staged on its own disk
(a mount point, a folder in one its user may not write), every file synced before the index is
visible; a write that fails leaves nothing, and what a killed one left goes with the next write."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from autotune.errors import DataError
from autotune.weights import INDEX, fingerprint, read_layout, weight_files, write_checkpoint
from autotune.weights.unfinished import MARKER
from tests.asuser import as_nobody, give_to_nobody, reachable_folder
from tests.tmpfs import small_disk

ROOT = Path(__file__).resolve().parents[2]
TENSORS = {f"layer.{i}.weight": torch.randn(256, 256) for i in range(4)}
"""1 MiB: four shards of 300 kB at most."""
SHARD_BYTES = 300_000


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def checkpoint_files(index: dict) -> list[str]:
    return sorted({INDEX, *index["weight_map"].values()})


def test_an_empty_mount_point_takes_the_checkpoint_on_its_own_disk(tmp_path):
    """``--out /mnt/x``: a rename from the folder beside it would cross to another disk."""
    with small_disk(tmp_path / "disk", "4m") as disk:
        index = write_checkpoint(TENSORS, disk, max_shard_bytes=SHARD_BYTES)
        assert set(read_layout(disk)) == set(TENSORS) == set(index["weight_map"])
        assert names(disk) == checkpoint_files(index)
    assert names(tmp_path) == ["disk"]


def test_a_write_that_fills_an_empty_mount_point_fails_there_and_leaves_it_empty(tmp_path):
    with small_disk(tmp_path / "disk", "512k") as disk:
        with pytest.raises(DataError) as err:
            write_checkpoint(TENSORS, disk, max_shard_bytes=SHARD_BYTES)
        assert str(err.value).startswith(f"{disk}: writing the checkpoint failed (")
        assert "No space left on device" in str(err.value), err.value  # its own disk filled
        assert str(err.value).endswith("; nothing was written there")
        assert names(disk) == []
    assert names(tmp_path) == ["disk"]


WRITE = """
import sys, torch
from autotune.weights import write_checkpoint
write_checkpoint({"w": torch.ones(4)}, sys.argv[1])
"""


def test_an_empty_folder_whose_parent_its_user_may_not_write_takes_the_checkpoint():
    """A folder made for the export by someone else (an admin's share): only it is writable."""
    with reachable_folder() as parent:
        out = parent / "out"
        out.mkdir()
        give_to_nobody(out)
        done = subprocess.run([*as_nobody(), sys.executable, "-c", WRITE, str(out)],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert set(read_layout(out)) == {"w"} and names(parent) == ["out"]


STOPPED = """
import os, signal, sys, torch
from autotune.weights import hf
hf._move_in = lambda *args: os.kill(os.getpid(), signal.{signal})  # every file written, none moved
hf.write_checkpoint({{"w": torch.ones(4)}}, sys.argv[1])
"""


def _stopped_before_moving_in(out: Path, sig: str) -> subprocess.Popen:
    """A writer of ``out`` that ``sig`` stops (or kills) once its files are written."""
    proc = subprocess.Popen([sys.executable, "-c", STOPPED.format(signal=sig), str(out)],
                            env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    if sig == "SIGKILL":
        assert proc.wait(timeout=120) == -signal.SIGKILL
        return proc
    while proc.poll() is None and Path(f"/proc/{proc.pid}/stat").read_text().split()[2] != "T":
        time.sleep(0.05)
    assert proc.poll() is None, "the writer ended before its files were moved in"
    return proc


@pytest.mark.parametrize("new", [True, False], ids=["new", "empty"])
def test_what_a_killed_write_left_is_removed_by_the_next_one(tmp_path, new):
    """A write killed (SIGKILL, the machine's OOM killer) leaves its staged files; the next write
    into the same folder takes them away, and the folder holds the checkpoint alone."""
    out = tmp_path / "out"
    if not new:
        out.mkdir()
    _stopped_before_moving_in(out, "SIGKILL")
    assert not (out / INDEX).exists()  # nothing of it is visible as a checkpoint
    index = write_checkpoint(TENSORS, out, max_shard_bytes=SHARD_BYTES)
    assert names(out) == checkpoint_files(index)
    assert names(tmp_path) == ["out"]


def test_a_write_in_progress_into_the_folder_is_left_alone_and_named(tmp_path):
    out = tmp_path / "out"
    proc = _stopped_before_moving_in(out, "SIGSTOP")
    try:
        with pytest.raises(DataError) as err:
            write_checkpoint(TENSORS, out)
        assert str(err.value) == (
            f"{out}: another write (process {proc.pid} on host {socket.gethostname()!r}) is "
            "putting a checkpoint there; give another folder, or wait for it to end"
        )
    finally:
        proc.kill()
        proc.wait()
    write_checkpoint(TENSORS, out)  # gone with its process
    assert set(read_layout(out)) == set(TENSORS)


def test_every_file_and_the_folder_are_synced_before_the_index_is_visible(tmp_path, monkeypatch):
    """A crash after the index is visible must not leave a shard it names empty or cut."""
    out, extra = tmp_path / "out", tmp_path / "config.json"
    extra.write_text("{}")
    synced: list[tuple[Path, bool]] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append((Path(os.readlink(f"/proc/self/fd/{fd}")), (out / INDEX).exists()))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    index = write_checkpoint(TENSORS, out, max_shard_bytes=SHARD_BYTES, extra_files=[extra])
    assert names(out) == sorted([*checkpoint_files(index), "config.json"])
    before = {path.name for path, visible in synced if not visible}
    assert set(names(out)) <= before, synced
    assert (out, False) in synced and synced[-1] == (out, True), synced  # shards, then the index


CRASHED = """
import sys, torch
from pathlib import Path
from tests.crashat import crash_at
from autotune.weights import write_checkpoint
crash_at(*sys.argv[1:4])
tensors = {{f"layer.{{i}}.weight": torch.randn(256, 256) for i in range(4)}}
write_checkpoint(tensors, sys.argv[4], max_shard_bytes={shard}, extra_files=[Path(sys.argv[5])])
"""
MOMENTS = {
    "first move": ("os.rename", "model-00001-of-00004.safetensors"),
    "index move": ("os.rename", INDEX),
    "marker removal": ("os.remove", MARKER),
}
"""Where a write is stopped among its last moves: before any file, before the index is in (the
shards and config.json are), and once the index is in but its marker not yet gone."""


def _crashed(out: Path, moment: str, sig: str = "SIGKILL") -> subprocess.Popen:
    """A writer of four shards and a config.json into ``out``, sent ``sig`` at ``moment``."""
    extra = out.parent / "config.json"
    extra.write_text("{}")
    script = CRASHED.format(shard=SHARD_BYTES)
    proc = subprocess.Popen([sys.executable, "-c", script, sig, *MOMENTS[moment], str(out), str(extra)],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    if sig == "SIGKILL":
        assert proc.wait(timeout=120) == -signal.SIGKILL
        return proc
    while proc.poll() is None and Path(f"/proc/{proc.pid}/stat").read_text().split()[2] != "T":
        time.sleep(0.05)
    assert proc.poll() is None, "the writer ended before it was stopped"
    return proc


def _unfinished_line(out: Path) -> str:
    return (
        f"{out}: an export into it did not finish ({MARKER} is there): its files are not a whole "
        f"checkpoint; run that export again (autotune export D/checkpoint-N --out {out}), or give "
        "another folder"
    )


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_a_write_killed_among_its_moves_is_refused_by_readers_and_redone_by_the_next(
    tmp_path, moment
):
    """Killed while it moves its files into the folder, a write leaves some of them there: no
    reader takes them for a checkpoint, and the next write into the folder replaces them."""
    out = tmp_path / "out"
    _crashed(out, moment)
    assert MARKER in names(out)
    for read in (read_layout, fingerprint, weight_files):
        with pytest.raises(DataError) as err:
            read(out)
        assert str(err.value) == _unfinished_line(out)
    index = write_checkpoint(TENSORS, out, max_shard_bytes=SHARD_BYTES)
    assert names(out) == checkpoint_files(index)
    assert set(read_layout(out)) == set(TENSORS)


def test_a_file_the_killed_write_did_not_write_is_kept_and_named(tmp_path):
    """A file put into the folder after the crash, or in place of one the write had moved there:
    the next write removes none of the folder's files and says which is not the killed write's."""
    out = tmp_path / "out"
    _crashed(out, "index move")
    shard = out / "model-00002-of-00004.safetensors"
    copy = tmp_path / "copy"
    shutil.copy(shard, copy)
    copy.replace(shard)  # the same bytes, another file
    before = names(out)
    with pytest.raises(DataError) as err:
        write_checkpoint(TENSORS, out, max_shard_bytes=SHARD_BYTES)
    assert str(err.value) == (
        f"{out}: holds '{shard.name}', which the export that did not finish there did not "
        "write; move it out, or give a new folder"
    )
    assert names(out) == before


def test_the_folder_of_a_write_still_moving_its_files_in_is_left_alone_and_named(tmp_path):
    out = tmp_path / "out"
    proc = _crashed(out, "marker removal", "SIGSTOP")
    try:
        before = names(out)
        with pytest.raises(DataError) as err:
            write_checkpoint(TENSORS, out)
        assert str(err.value) == (
            f"{out}: another write (process {proc.pid} on host {socket.gethostname()!r}) is "
            "putting a checkpoint there; give another folder, or wait for it to end"
        )
        assert names(out) == before
    finally:
        proc.kill()
        proc.wait()


def _dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", ""])
    done.wait()
    return done.pid


@pytest.mark.parametrize(
    "left, removed",
    [
        ("dead", True),
        ("running", False),  # this test's own process
        ("dead, holding a link", False),
        ("dead, of another folder", False),
    ],
)
def test_the_staging_folder_of_the_layout_before_is_removed_where_its_process_is_gone(
    tmp_path, left, removed
):
    """That layout staged ``.<name>.tmp-<pid>`` beside the folder, and a killed write left it for
    ever; the next write into the folder removes it, and nothing that may still be written or is
    not a checkpoint's files."""
    pid = os.getpid() if left == "running" else _dead_pid()
    name = ".other" if left.endswith("another folder") else ".out"
    old = tmp_path / f"{name}.tmp-{pid}"
    old.mkdir()
    (old / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 64)
    (old / INDEX).write_text("{}")
    if left.endswith("a link"):
        (old / "config.json").symlink_to(tmp_path / "elsewhere.json")
    write_checkpoint(TENSORS, tmp_path / "out", max_shard_bytes=SHARD_BYTES)
    assert old.exists() != removed
