"""``kill -9`` of the warm parent that forked a running trial (the zygote): the trial is the
infrastructure's loss, not the configuration's failure; it is failed as ``interrupted`` and queued
again, so the study keeps its stock baseline."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest
from optuna.trial import TrialState

from autotune.search.trials import QUEUED_AGAIN_FROM, reason_of, record_of
from tests.search.test_faults import HANG, hang_argv, journal_study, start_tuner, wait_for_trial
from tests.trialprocs import children_with_commands, guard_of

pytestmark = pytest.mark.slow


def zygote_of(tuner: int) -> psutil.Process:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for child, command in children_with_commands(tuner):
            if "autotune.train.trial.zygote" in command:
                return child
        time.sleep(0.2)
    raise AssertionError("the tuner started no zygote")


def next_trial(tmp_path: Path, after: Path, seconds: float = 240.0) -> Path:
    """The folder of the trial the tuner started after the one in ``after``: it started that one
    only once it had recorded the lost one."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for folder in (tmp_path / "tmp").glob("autotune-run-*"):
            if folder != after and (folder / "config.yaml").exists():
                return folder
        time.sleep(0.2)
    raise AssertionError("the lost trial was not run again")


def test_a_killed_zygote_queues_its_trial_again_and_the_study_keeps_its_stock(tmp_path):
    release = tmp_path / "release"  # the trial hangs (batch size 5) until the file exists
    tuner = start_tuner(
        tmp_path, hang_argv(tmp_path, 5), CRASHY_HANG_S="300", CRASHY_RELEASE=str(release)
    )
    try:
        folder = wait_for_trial(tmp_path, 2)
        assert guard_of(folder), "the stock trial was not forked from a zygote"
        zygote_of(tuner.pid).kill()
        next_trial(tmp_path, folder)
        release.touch()  # the trial measured again trains
        output = tuner.communicate(timeout=400)[0]
    finally:
        if tuner.poll() is None:
            tuner.kill()
    assert tuner.returncode == 0, output
    lost, measured = journal_study(tmp_path / "run", HANG).trials
    assert lost.state == TrialState.FAIL and reason_of(lost) == "interrupted", record_of(lost)
    assert "warm parent" in record_of(lost).failure.error
    assert lost.user_attrs["stock"] and measured.user_attrs["stock"]
    assert measured.state == TrialState.COMPLETE and measured.user_attrs[QUEUED_AGAIN_FROM] == 0
    assert (tmp_path / "run" / "best.yaml").exists()
