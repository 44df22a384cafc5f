"""A run killed from outside is recorded as what really killed it (real processes, real signals).

The crashy workload (``tests/search/crashy.py``) hangs at batch size 5 and fills memory at 7.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from autotune.config.stock import stock_config
from autotune.train.trial.exitcause import oom_kills
from autotune.train.trial.launch import launch
from autotune.train.trial.procgroup import PID_FILE
from tests.memcgroup import memory_cgroup
from tests.trialprocs import guard_of, trial_processes

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = "tests.search.crashy:Workload"


def crashy(batch_size: int):
    cfg = stock_config(WORKLOAD, "tiny")
    cfg.batch_size, cfg.data.source = batch_size, "synthetic"
    return cfg


def wait_for(predicate, seconds: float = 180.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


def test_a_worker_killed_by_sigkill_is_not_called_out_of_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    got = {}
    run = threading.Thread(
        target=lambda: got.setdefault("record", launch(crashy(5), steps=1, warmup=0, timeout=600))
    )
    run.start()
    pid_file = wait_for(lambda: next(tmp_path.glob(f"autotune-run-*/{PID_FILE}"), None))
    folder = pid_file.parent
    worker = int(wait_for(pid_file.read_text))
    session = guard_of(folder)
    time.sleep(1)
    os.kill(worker, signal.SIGKILL)  # as a user or a scheduler would
    run.join(timeout=60)
    failure = got["record"].failure
    assert failure.reason == "killed", failure
    assert failure.error.startswith("killed by SIGKILL")
    if oom_kills() is not None:  # the kernel lets this machine tell: it says so
        assert failure.error == "killed by SIGKILL, not by the OOM killer"
    assert not folder.exists() and not trial_processes(folder, session)


def test_a_run_whose_temporary_folder_fills_is_queued_again_not_a_crash(tmp_path, monkeypatch):
    """The disk of the trial's temporary folder fills while it runs: the worker cannot write its
    record and exits 1. That was ``crash`` ("exited with code 1 without a result"), a verdict on
    the configuration (for stock: "fix the workload"); it is the machine's: interrupted, queued again."""
    from tests import tmpfs

    with tmpfs.small_disk(tmp_path / "disk", "16m") as disk:
        monkeypatch.setattr(tempfile, "tempdir", str(disk))
        monkeypatch.setenv("CRASHY_RELEASE", str(tmp_path / "release"))
        got = {}
        run = threading.Thread(
            target=lambda: got.setdefault(
                "record", launch(crashy(5), steps=1, warmup=0, timeout=600)
            )
        )
        run.start()
        pid_file = wait_for(lambda: next(disk.glob(f"autotune-run-*/{PID_FILE}"), None))
        wait_for(pid_file.read_text)  # the worker runs, hanging in its loader
        tmpfs.fill(disk)
        (tmp_path / "release").touch()
        run.join(timeout=300)
    failure = got["record"].failure
    assert failure.reason == "interrupted", failure
    assert "has no space left" in failure.error and "queued again" in failure.error


DRIVER = """
import sys
from autotune.config.stock import stock_config
from autotune.train.trial.launch import launch
cfg = stock_config("tests.search.crashy:Workload", "tiny")
cfg.batch_size, cfg.data.source = 7, "synthetic"
print(launch(cfg, steps=1, warmup=0, timeout=300).to_json())
"""


def test_a_worker_the_oom_killer_killed_is_out_of_memory(tmp_path):
    """Only where a memory cgroup can be made (root, cgroup v1, or v2 with the memory controller delegated)."""
    cgroup = memory_cgroup(f"autotune-test-{os.getpid()}", 1536 << 20)
    if cgroup is None:
        pytest.skip("no memory cgroup can be made here for the OOM killer to act in")
    from autotune.train.trial.record import TrialRecord

    try:  # the driver (a tuner of one run) and its trial live in the limited cgroup
        done = subprocess.run(
            [
                "sh",
                "-c",
                f'echo $$ > {cgroup}/cgroup.procs && exec "$0" -c "$1"',
                sys.executable,
                DRIVER,
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
            env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)},
        )
    finally:
        wait_for(lambda: not (cgroup / "cgroup.procs").read_text().strip(), 30)
        cgroup.rmdir()
    assert done.returncode == 0, done.stderr
    failure = TrialRecord.from_json(done.stdout.strip().splitlines()[-1]).failure
    assert failure.reason == "oom" and "OOM killer" in failure.error, failure
    assert not list(tmp_path.glob("autotune-run-*"))
