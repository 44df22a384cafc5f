"""Trials forked from a warm zygote: the same runs as executed ones, started without the imports."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from autotune.config.stock import stock_config
from autotune.train.trial import zygote_client
from autotune.train.trial.launch import launch
from tests.trialprocs import children_with_commands

pytestmark = pytest.mark.slow

CRASHY = "tests.search.crashy:Workload"


def tiny(workload: str = "gr00t_n16", batch_size: int = 2):
    cfg = stock_config(workload, "tiny")
    cfg.device, cfg.batch_size, cfg.data.source = "cpu", batch_size, "synthetic"
    return cfg


def zygotes() -> list[psutil.Process]:
    return [
        p for p, command in children_with_commands() if "autotune.train.trial.zygote" in command
    ]


def test_a_forked_trial_trains_as_an_executed_one_and_starts_without_the_imports(
    monkeypatch, tmp_path
):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv(zygote_client.ENABLE_ENV, "0")
    executed = launch(tiny(), steps=3, warmup=1, timeout=300)
    monkeypatch.setenv(zygote_client.ENABLE_ENV, "1")
    first, forked = (launch(tiny(), steps=3, warmup=1, timeout=300) for _ in range(2))
    assert executed.ok and first.ok and forked.ok, (executed.failure, first.failure, forked.failure)
    assert (
        forked.measurement.losses == executed.measurement.losses
    )  # the same seeds, the same model
    assert len(zygotes()) == 1
    # the second start is a fork: no torch import (seconds) before the run's first line
    assert forked.cost.parts["start"] < executed.cost.parts["start"] / 3, (
        forked.cost,
        executed.cost,
    )


def test_a_trial_with_another_environment_gets_a_zygote_of_its_own(monkeypatch, tmp_path):
    """The crashy workload's hang lasts ``$CRASHY_HANG_S``: the variable must reach the forked worker."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert launch(tiny(), steps=1, warmup=0, timeout=300).ok
    before = {p.pid for p in zygotes()}
    record = launch(
        tiny(CRASHY, batch_size=5), steps=1, warmup=0, timeout=300, extra_env={"CRASHY_HANG_S": "0"}
    )
    assert record.ok, record.failure
    after = {p.pid for p in zygotes()}
    assert (
        len(after) == 1 and not after & before
    )  # the idle one retired, a new one for the new environment


def test_a_zygote_that_died_is_replaced_and_the_trial_still_runs(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert launch(tiny(), steps=1, warmup=0, timeout=300).ok
    (zygote,) = zygotes()
    os.kill(zygote.pid, signal.SIGKILL)
    zygote.wait(10)
    record = launch(tiny(), steps=1, warmup=0, timeout=300)
    assert record.ok, record.failure
    assert [p.pid for p in zygotes()] != [zygote.pid]


def test_the_zygotes_imports_load_no_cuda_driver():
    """A child forked after CUDA's initialisation cannot use CUDA. Meaningful on a GPU machine too."""
    code = "from autotune.train.trial.zygote import preload, cuda_loaded; preload(); print(cuda_loaded())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split()[-1] == "False", out.stderr


def test_a_mapped_cuda_driver_is_seen(monkeypatch, tmp_path):
    from autotune.train.trial import zygote

    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 0:0 0 /usr/lib/x86_64-linux-gnu/libcuda.so.1\n")
    real_open = open
    monkeypatch.setattr(
        "builtins.open",
        lambda f, *a, **k: real_open(maps if f == "/proc/self/maps" else f, *a, **k),
    )
    assert zygote.cuda_loaded()


def test_a_forked_worker_uses_the_trials_tmpdir(monkeypatch, tmp_path):
    """The zygote's imports cached tempfile's folder; its trials' TMPDIR (a variable the zygote does
    not share with them) must still decide where a worker's temporary files go."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert launch(tiny(), steps=1, warmup=0, timeout=300).ok  # a zygote started with this TMPDIR
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv("TMPDIR", str(other))
    record = launch(
        tiny(CRASHY, batch_size=9), steps=1, warmup=0, timeout=300
    )  # fails naming its tempdir
    assert not record.ok and f"tempdir={other}" in record.failure.error, record.failure


@pytest.mark.parametrize("end", ["exit", "kill"])
def test_the_zygotes_folder_goes_with_it_when_its_tuner_ends(end):
    """The zygote's socket folder in $TMPDIR is removed when its tuner ends, by exiting as every run
    does or by ``kill -9``: each run left an ``autotune-zygote-*`` folder behind."""
    # a short $TMPDIR: under a long one (pytest's, with xdist) the socket's folder goes to /tmp
    tmp = Path(tempfile.mkdtemp(prefix="zt-", dir="/tmp"))
    try:
        _zygote_folder_goes(tmp, end)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _zygote_folder_goes(tmp: Path, end: str) -> None:
    code = (
        "import sys\n"
        "from autotune.train.trial.launch import launch\n"
        "from tests.train.test_zygote import tiny\n"
        "record = launch(tiny(), steps=1, warmup=0, timeout=300)\n"
        "print('ran' if record.ok else record.failure, flush=True)\n"
        "sys.stdin.read()\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    tuner = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": root},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert tuner.stdout.readline() == "ran\n"
        (zygote,) = [
            p
            for p, command in children_with_commands(tuner.pid)
            if "autotune.train.trial.zygote" in command
        ]
        assert [p.name for p in tmp.glob("autotune-zygote-*")] != []  # while the tuner runs
    finally:
        tuner.kill() if end == "kill" else tuner.stdin.close()
        tuner.wait(60)
    psutil.wait_procs([zygote], timeout=10)
    assert not zygote.is_running()
    assert [p.name for p in tmp.iterdir()] == []
