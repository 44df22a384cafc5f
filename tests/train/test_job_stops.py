"""How a job ends when it does not reach its end: a step that raises or whose loss is not finite
leaves what it measured in the metrics files; Ctrl-C keeps the last completed step as SIGTERM does."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch

from autotune.cli import main
from autotune.train.job import checkpoint, loop
from autotune.train.job.control import Control
from autotune.train.job.loop import StepLog
from autotune.train.session import Session
from tests.train.test_job_cpu import logged_steps, start, train, wait_for

pytestmark = pytest.mark.slow
JOB = ["train", "--preset", "tiny", "--synthetic", "--no-progress", "--log-steps", "4"]


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def failing_at(monkeypatch, step: int, how: str) -> None:
    """Session.step raises (``how`` = raise) or returns a NaN loss (nan) at ``step`` of the job."""
    real, calls = Session.step, []

    def step_(self, batch):
        calls.append(1)
        loss, norm = real(self, batch)
        if len(calls) < step:
            return loss, norm
        if how == "raise":
            raise RuntimeError("the device fell off the bus")
        return torch.full_like(loss, float("nan")), norm

    monkeypatch.setattr(Session, "step", step_)


@pytest.mark.parametrize("how", ["raise", "nan"])
def test_a_failing_step_keeps_the_metrics_of_the_steps_before_it(
    tmp_path, capsys, monkeypatch, how
):
    out = tmp_path / "job"
    failing_at(monkeypatch, 7, how)
    argv = [*JOB, "--max-steps", "10", "--save-steps", "5", "--output-dir", str(out)]
    if how == "raise":
        with pytest.raises(RuntimeError, match="fell off the bus"):
            main(argv)
    else:
        assert main(argv) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            "autotune: error: the loss is not finite at step 7"
        )
    rows = records(out)
    logged = [r["step"] for r in rows if "loss" in r]
    assert logged == [4, 6], rows  # steps 5 and 6 trained and were measured before step 7 failed
    saved = [r["step"] for r in rows if r.get("event") == "checkpoint"]
    assert saved == [5], rows  # the checkpoint written before the failure is in the log too


class LaggingLog(StepLog):
    """The CUDA case on the CPU: the host runs a step ahead of the losses it reads, so the newest
    step's loss is handed out one step late unless the log is drained."""

    def __init__(self, device) -> None:
        super().__init__(device)
        self.held: list = []

    def poll(self):
        self.held += super().poll()
        out, self.held = self.held[:-1], self.held[-1:]
        return out

    def drain(self):
        out, self.held = self.held + super().poll(), []
        return out


def test_a_loss_read_late_that_is_not_finite_is_never_checkpointed(tmp_path, capsys, monkeypatch):
    """Step 4's loss is NaN and read after the step (as on CUDA): checkpoint-4 would keep its update."""
    monkeypatch.setattr(loop, "StepLog", LaggingLog)
    failing_at(monkeypatch, 4, "nan")
    out = tmp_path / "job"
    assert main([*JOB, "--max-steps", "6", "--save-steps", "2", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "autotune: error: the loss is not finite at step 4"
    assert [s for s, _ in checkpoint.checkpoints(out)] == [2]


def test_ctrl_c_saves_the_last_step_says_so_on_one_line_and_the_job_resumes_there(tmp_path, capsys):
    """Ctrl-C (SIGINT to the whole foreground group, loader workers too) stops the job at the step
    boundary as SIGTERM does: that step is saved, one line says so, the exit status is 130."""
    out = tmp_path / "job"
    proc = start(out)
    wait_for(lambda: max(logged_steps(out), default=0) >= 1, proc)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    res = json.loads(stdout.strip().splitlines()[-1])
    stopped = res["final_step"]
    assert res["preempted"] and res["stopped_by"] == "SIGINT" and stopped < 6
    assert stderr.strip().splitlines()[-1] == (
        f"autotune: interrupted at step {stopped} of 6: saved as {out / f'checkpoint-{stopped}'}; "
        "the same command continues"
    )
    assert logged_steps(out) == list(range(1, stopped + 1))
    code, again, _ = train(capsys, out, "--stop-at", str(stopped + 1))
    assert code == 0 and again["start_step"] == stopped + 1


def test_ctrl_c_before_the_first_step_trains_and_saves_nothing_and_says_so(
    tmp_path, capsys, monkeypatch
):
    """Ctrl-C while the job builds or loads (before its first step): no step to save."""

    def pressed(self):
        self.terminated, self.stopped_by = True, "SIGINT"

    monkeypatch.setattr(Control, "catch_signals", pressed)
    out = tmp_path / "job"
    assert main([*JOB, "--max-steps", "6", "--output-dir", str(out)]) == 130
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == (
        "trained nothing: at step 0 of 6 (from the start); stopped by SIGINT"
    )
    assert captured.err.strip().splitlines() == [
        "autotune: Ctrl-C: stopping (Ctrl-C again stops at once)",
        "autotune: interrupted at step 0 of 6: nothing trained since the start; the same command "
        "continues",
    ]
    assert checkpoint.checkpoints(out) == []
