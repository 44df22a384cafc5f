"""A job folder has one owner: a second ``autotune train`` on the same ``--output-dir`` is refused with
one line naming the folder and the first job, and touches nothing; the lock file keeps no secret,
is readable by its owner alone, and is gone when the job ends; a dead owner's lock is taken over."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.errors import ConfigError
from tests.clirun import ROOT
from tests.tmpfs import fill, small_disk

pytestmark = pytest.mark.slow
JOB = ["--preset", "tiny", "--save-steps", "1000", "--log-steps", "1", "--no-progress"]
SECRET = "postgresql://u:2024#Spring@h/db"


def start(out: Path, steps: int) -> subprocess.Popen:
    argv = ["train", *JOB, "--max-steps", str(steps), "--output-dir", str(out)]
    return subprocess.Popen(
        [sys.executable, "-m", "autotune", *argv, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )


def logged(out: Path) -> list[str]:
    path = out / "metrics.jsonl"
    return path.read_text().splitlines() if path.exists() else []


def test_a_second_job_on_the_folder_is_refused_and_the_first_goes_on(tmp_path, capsys):
    out = tmp_path / "job"
    first = start(out, 400)
    try:
        deadline = time.monotonic() + 240
        while len(logged(out)) < 2:
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first job logged no step"
            time.sleep(0.1)
        lock = out / "run.lock"
        assert stat.S_IMODE(lock.stat().st_mode) == 0o600
        owner = json.loads(lock.read_text())
        assert owner["pid"] == first.pid and owner["what"] == "autotune train"
        before = logged(out)
        assert main(["train", *JOB, "--max-steps", "4", "--output-dir", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert err[0].startswith(
            f"autotune: error: {out} is in use by autotune train (pid {first.pid} on host "
            f"{socket.gethostname()}, since "
        ) and err[0].endswith(": wait for it to end, or give another --output-dir")
        assert logged(out)[: len(before)] == before and first.poll() is None
    finally:
        first.send_signal(signal.SIGTERM)  # the job saves a checkpoint and exits 0
        stdout, stderr = first.communicate(timeout=240)
    assert first.returncode == 0, stderr
    result = json.loads(stdout.strip().splitlines()[-1])
    steps = [json.loads(line)["step"] for line in logged(out) if "loss" in json.loads(line)]
    assert steps == list(range(1, result["final_step"] + 1))  # nothing truncated or replaced
    assert not (out / "run.lock").exists()


def test_the_lock_of_a_dead_owner_is_taken_over(tmp_path, capsys):
    out = tmp_path / "job"
    out.mkdir()
    lock = out / "run.lock"
    lock.write_text(json.dumps({"what": "autotune train", "pid": 2**22 + 1, "host": "h", "since": "x",
                                "command": f"autotune train --storage {SECRET}"}))  # fmt: skip
    lock.chmod(0o644)
    assert main(["train", *JOB, "--max-steps", "2", "--output-dir", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["final_step"] == 2
    assert not lock.exists()


def test_a_folder_the_owner_made_and_left_empty_is_removed_and_any_other_kept(tmp_path):
    """A command that fails before writing (a storage it cannot open) leaves no empty run folder."""
    from autotune.ownership import own_folder

    made = tmp_path / "runs" / "new"
    with pytest.raises(RuntimeError), own_folder(made, "autotune run", "--out"):
        raise RuntimeError("the storage cannot be opened")
    assert not made.exists() and made.parent.is_dir()
    written = tmp_path / "written"
    with own_folder(written, "autotune run", "--out"):
        (written / "study.journal").write_text("{}\n")
    assert sorted(p.name for p in written.iterdir()) == ["study.journal"]
    given = tmp_path / "given"
    given.mkdir()
    with own_folder(given, "autotune run", "--out"):
        pass
    assert given.is_dir()  # the user's own folder stays, empty or not


def test_a_full_disk_under_the_folder_is_one_line_and_leaves_no_lock(tmp_path, capsys):
    """The owner's record cannot be written (a full 64 KiB tmpfs): one line naming the folder and
    the lock, and neither an empty lock file nor the folder it made is left."""
    with small_disk(tmp_path / "disk", "64k") as disk:
        fill(disk)
        out = disk / "job"
        assert main(["train", *JOB, "--max-steps", "2", "--output-dir", str(out)]) == 2
        assert capsys.readouterr().err == (
            f"autotune: error: --output-dir {out}: cannot write its run.lock (No space left on "
            "device); give a folder you can write\n"
        )
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def _trainer_folder(out: Path) -> dict[str, bytes]:
    """A Hugging Face Trainer's output folder (its checkpoint and TensorBoard run) and another
    tool's metrics.jsonl; what each file holds."""
    (out / "checkpoint-2").mkdir(parents=True)
    (out / "checkpoint-2" / "trainer_state.json").write_text(
        '{"global_step": 2, "log_history": []}'
    )
    (out / "checkpoint-2" / "model.safetensors").write_bytes(b"weights")
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 3.0}\n{"step": 50, "loss": 2.0}\n')
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}


def test_a_folder_of_another_programs_checkpoints_and_metrics_is_refused_untouched(
    tmp_path, capsys
):
    """A job there would delete its checkpoint-2 (--save-total-limit) and rewrite its metrics.jsonl."""
    out = tmp_path / "trainer"
    before = _trainer_folder(out)
    argv = ["train", *JOB, "--max-steps", "4", "--save-total-limit", "1", "--output-dir", str(out)]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        f"autotune: error: --output-dir {out}: holds checkpoint-2, metrics.jsonl of no autotune job "
        "(no checkpoint's trainer_state.json nor metrics.jsonl is a job's), which the job would "
        "delete or overwrite: give another --output-dir (a new or empty folder)"
    )
    assert {
        str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()
    } == before


def test_a_jobs_own_folder_is_its_own_whatever_it_was_stopped_at(tmp_path):
    """Killed before its first log line (an empty metrics.jsonl), or before its first checkpoint (its
    own lines), or with checkpoints of its own: the job's folder, which it resumes or starts again."""
    from autotune.train.job.folder import check_job_folder

    out = tmp_path / "job"
    (out / "tensorboard").mkdir(parents=True)
    (out / "tensorboard" / "events.out.tfevents.1").write_bytes(b"")
    (out / "metrics.jsonl").write_text("")
    check_job_folder(out)
    (out / "metrics.jsonl").write_text('{"time": 1.5, "step": 4, "loss": 1.2}\n')
    check_job_folder(out)
    (out / "metrics.jsonl").write_text("")
    (out / "checkpoint-4").mkdir()
    (out / "checkpoint-4" / "trainer_state.json").write_text('{"step": 4, "files": {}}')
    check_job_folder(out)
    (out / "metrics.jsonl").write_text('{"step": 4, "loss": 1.2}\n')  # another tool's line
    (out / "checkpoint-4" / "trainer_state.json").write_text('{"global_step": 4}')
    with pytest.raises(ConfigError, match="holds checkpoint-4, metrics.jsonl, tensorboard of no"):
        check_job_folder(out)


def test_a_lock_whose_record_is_nested_past_the_stack_names_another_process(tmp_path):
    """The owner's record is read for the line that refuses a second owner: JSON nested deeper than
    Python's stack (RecursionError) is no record, as a half-written one is not."""
    import fcntl

    from autotune.ownership import LOCK, own_folder

    out = tmp_path / "job"
    out.mkdir()
    (out / LOCK).write_text("[" * 50000 + "]" * 50000)
    fd = os.open(out / LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held, as a running owner holds it
        refused = pytest.raises(ConfigError, match="in use by another autotune process")
        with refused, own_folder(out, "autotune train", "--output-dir"):
            pass
    finally:
        os.close(fd)
