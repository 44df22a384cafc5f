"""A hang-up (the ssh session drops, the terminal closes) stops ``autotune train``'s job as SIGTERM
does: every rank saves the step it reached and the job exits 0, though its terminal is gone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.train.job import checkpoint
from tests.ports import free_port
from tests.terminal import start_attached
from tests.train.test_job_cpu import logged_steps, wait_for

pytestmark = pytest.mark.slow
JOB = [
    "train",
    "--preset",
    "tiny",
    "--max-steps",
    "1000",
    "--save-steps",
    "500",
    "--log-steps",
    "1",
]
"""A job far longer than the test: the one checkpoint it writes is the stop's."""


def hung_up_after_a_step(out: Path, *extra: str, stdout: int | None = None) -> tuple[int, str, str]:
    """The job's exit code, what its terminal showed and its ``stdout`` (None: the terminal), hung
    up once the job logged a step."""
    argv = [sys.executable, "-m", "autotune", *JOB, "--output-dir", str(out), *extra]
    job, terminal = start_attached(argv, stdout=stdout, text=True)
    try:
        wait_for(lambda: max(logged_steps(out), default=0) >= 1, job)
        terminal.hang_up(job)
        printed = job.communicate(timeout=120)[0]
        return job.returncode, terminal.text, printed
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()


def test_a_hang_up_saves_the_step_the_job_reached_and_exits_0(tmp_path):
    out = tmp_path / "job"
    code, shown, _ = hung_up_after_a_step(out)  # loader workers, a progress bar on the terminal
    assert code == 0, shown
    ((stopped, _),) = checkpoint.checkpoints(out)
    assert 1 <= stopped < 500 and logged_steps(out) == list(range(1, stopped + 1))
    assert not (out / "run.lock").exists()


def test_the_ranks_of_a_job_are_told_of_the_hang_up_and_save(tmp_path):
    out = tmp_path / "job"
    ranks = ["--synthetic", "--nproc", "2", "--nnodes", "1", "--node-rank", "0",
             "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--no-progress", "--json"]  # fmt: skip
    code, shown, printed = hung_up_after_a_step(out, *ranks, stdout=subprocess.PIPE)
    assert code == 0, shown
    result = json.loads(printed.strip().splitlines()[-1])
    assert result["preempted"] and result["stopped_by"] == "SIGHUP", printed
    assert checkpoint.checkpoints(out)[-1][0] == result["final_step"] < 500
    assert not (out / "run.lock").exists()


def test_a_rank_stopped_with_the_others_does_not_guess_their_signal(capsys):
    """Rank 0 of several nodes, whose own node saw no signal: it stopped at the step the ranks
    agreed on, for a signal it cannot name."""
    from autotune.train.job.cli import _print

    _print({"losses": [], "resumed_from": None, "preempted": True, "stopped_by": None,
            "final_step": 0, "max_steps": 6})  # fmt: skip
    assert capsys.readouterr().out == (
        "trained nothing: at step 0 of 6 (from the start); stopped by a signal to another rank\n"
    )
