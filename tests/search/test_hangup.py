"""A hang-up (the ssh session drops, the terminal closes) stops ``autotune run`` as SIGTERM does:
the trial in flight recorded as interrupted and queued again, its processes and temporary folder
gone, the folder's lock released, the report written where SIGTERM writes it; nothing written to
the gone terminal (or to the ``| tee`` the same hang-up ended) breaks the clean-up."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

from autotune.search.trials import reason_of, record_of
from tests.search.test_faults import (  # noqa: F401  finished_study: the fixture, shared
    HANG,
    ROOT,
    RUN,
    add_a_best_far_above_stock,
    copy_of,
    finished_study,
    gone,
    hang_argv,
    journal_study,
    wait_for_trial,
)
from tests.terminal import KINDS, Output, start_attached
from tests.trialprocs import trial_processes

pytestmark = pytest.mark.slow


def start_tuner(tmp_path: Path, argv: list[str], output: str):
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "PYTHONPATH": str(ROOT)}
    return start_attached([sys.executable, "-m", "autotune", *argv], output, env=env, cwd=ROOT)


def hung_up(tuner, output: Output) -> int:
    """The tuner's exit code once its output is taken away (killed if it does not end)."""
    try:
        output.hang_up(tuner)
        return tuner.wait(timeout=60)
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait()


@pytest.mark.parametrize("output", KINDS)
def test_a_hang_up_stops_the_run_as_sigterm_does(tmp_path, output):
    tuner, shown = start_tuner(tmp_path, hang_argv(tmp_path, 5), output)
    folder = wait_for_trial(tmp_path, 2)
    processes = trial_processes(folder)
    journal = tmp_path / "run" / "study.journal"
    before = journal.read_bytes()
    assert hung_up(tuner, shown) == 128 + signal.SIGHUP, shown.text
    assert not folder.exists() and gone(processes)
    assert not (tmp_path / "run" / "run.lock").exists() and not list((tmp_path / "tmp").iterdir())
    assert journal.read_bytes().startswith(before)  # the trial's end appended, nothing rewritten
    stopped, queued = journal_study(tmp_path / "run", HANG).trials
    assert stopped.state == TrialState.FAIL and reason_of(stopped) == "interrupted"
    assert record_of(stopped).failure.error == "the tuner was stopped by SIGHUP while the trial ran"
    assert queued.state == TrialState.WAITING and queued.user_attrs["queued_again_from"] == 0


def test_a_hang_up_in_the_confirmation_still_writes_the_report(finished_study, tmp_path):  # noqa: F811
    """The report is written (and its path printed to the gone terminal) on the way out."""
    out = copy_of(finished_study, tmp_path)
    add_a_best_far_above_stock(journal_study(out))
    argv = [*RUN, "--trials", "3", "--out", str(out)]
    argv[argv.index("--confirm-rounds") + 1] = "2"
    best = (out / "best.yaml").read_bytes()
    tuner, shown = start_tuner(tmp_path, argv, "terminal")
    deadline = time.monotonic() + 240
    while "confirming, round 1: stock" not in shown.text and time.monotonic() < deadline:
        assert tuner.poll() is None, shown.text
        time.sleep(0.05)
    assert hung_up(tuner, shown) == 128 + signal.SIGHUP, shown.text
    assert (out / "best.yaml").read_bytes() == best
    assert json.loads((out / "run.json").read_text())["finished_at"] is None
    assert "running or interrupted" in (out / "report.html").read_text()
    assert not (out / "run.lock").exists() and not list((tmp_path / "tmp").iterdir())
