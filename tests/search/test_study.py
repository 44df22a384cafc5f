"""End-to-end studies on the CPU: ``autotune run`` through ``autotune.cli.main``, tiny preset, synthetic data."""

from __future__ import annotations

import csv

import optuna
import pytest
from optuna.trial import TrialState

from autotune.cli import main
from autotune.config import load_config
from autotune.search.trials import measurement_of, reason_of, record_of
from tests.studies import CRASHY, CRASHY_STUDY, QUICK, copy_of, journal

pytestmark = pytest.mark.slow

RUN = QUICK[: QUICK.index("--reference")]
"""The session's quick study's command without its reference trial."""


def load_study(out, name):
    return optuna.load_study(study_name=name, storage=journal(out))


def test_study_writes_a_trainable_best_yaml_and_resumes(
    quick_run, quick_run_printed, tmp_path, capsys
):
    """The session's quick study (``tests/studies.py``: RUN with a reference trial), then run on."""
    out = copy_of(quick_run, tmp_path)
    printed = quick_run_printed
    assert "trial 1/3 #0:" in printed and "[stock]" in printed and "trial 3/3" in printed
    best = load_config(out / "best.yaml")
    prov = best.provenance
    assert (
        prov["samples_per_s"] > 0
        and prov["stock_samples_per_s"] > 0
        and prov["speedup_vs_stock"] >= 1.0
    )
    assert (
        prov["peak_memory_bytes"] > 0
        and prov["world_size"] == 1
        and prov["environment"]["device"] == "cpu"
    )
    assert best.preset == "tiny" and best.data.source == "synthetic"
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert len(rows) == 3 and rows[0]["user_attrs_stock"] == "True"
    assert (
        float(rows[0]["samples_per_s"]) == pytest.approx(prov["stock_samples_per_s"])
        and "user_attrs_record" not in rows[0]
    )
    # both MFU counts: the upstream step's FLOPs and the useful ones (no LM-head logits), in trials.csv and best.yaml
    assert (
        0 < float(rows[0]["useful_mfu"]) < float(rows[0]["mfu"])
        and 0 < prov["useful_mfu"] < prov["mfu"]
    )
    assert main(["train", "--config", str(out / "best.yaml"), "--steps", "1", "--warmup", "0"]) == 0

    # the same command with more trials continues the study; neither the stock trial nor the
    # reference is enqueued twice
    capsys.readouterr()
    assert main([*QUICK[:4], "4", *QUICK[5:], "--out", str(out)]) == 0
    assert "continuing study" in capsys.readouterr().out
    study = load_study(out, "gr00t_n16-tiny-quick")
    assert len(study.trials) == 4
    assert [t.number for t in study.trials if t.user_attrs.get("stock")] == [0]
    assert [t.number for t in study.trials if t.user_attrs.get("reference")] == [1]
    assert len(list(csv.DictReader((out / "trials.csv").open()))) == 4


def test_failed_trials_are_recorded_with_their_reason(
    failed_run, failed_run_printed, tmp_path, capsys
):
    """The session's failed study (``tests/studies.py``): batch size 3 crashes, fp8 on CPU is refused,
    4 is slow; run on, batch size 5 hangs (killed at the timeout). The study completes."""
    assert "failed (config)" in failed_run_printed
    out = copy_of(failed_run, tmp_path)
    name = CRASHY_STUDY
    study = load_study(out, name)
    study.enqueue_trial({"batch_size": 5, "precision.regions.dit": "bf16"})
    argv = [
        "run",
        "--workload",
        CRASHY,
        "--preset",
        "tiny",
        "--space",
        str(failed_run.parent / "fail.yaml"),
        "--trials",
        "5",
        "--synthetic",
        "--confirm-rounds",
        "0",
        "--converge-after",
        "0",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--timeout-per-trial",
        "10",  # the only trial this run starts is the hang: it ends at the timeout however long that is
        "--profile-steps",
        "0",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "failed (timeout)" in printed
    trials = load_study(out, name).trials
    # #3 (batch size 4, slow) is the report tests' pruned trial
    ours = [trials[n] for n in (0, 1, 2, 4)]
    assert [t.state for t in ours] == [
        TrialState.COMPLETE,
        TrialState.FAIL,
        TrialState.FAIL,
        TrialState.FAIL,
    ]
    reasons = [reason_of(t) for t in ours]
    assert (
        reasons[0] is None
        and reasons[1] in ("error", "crash")
        and reasons[2:] == ["config", "timeout"]
    )
    crash = record_of(trials[1]).failure
    assert "this batch size always crashes" in crash.error
    assert (
        crash.reason == "crash" or "RuntimeError" in crash.traceback
    )  # the worker's traceback, kept with its record
    # the CPU's space has no fp8 choice: the queued fp8 trial is refused, not a crash
    error = record_of(trials[2]).failure.error
    assert (
        "precision.regions.dit: a queued value is not one of this machine's choices" in error
        and "'fp8'" in error
    )
    assert load_config(out / "best.yaml").batch_size == 2


def test_a_two_process_study_profiles_every_rank(tmp_path):
    """``--nproc 2``: each trial is a gloo DDP run of two processes; the stock trial's profile has
    a trace per rank, and ``best.yaml`` says the world size it was measured at."""
    out = tmp_path / "run"
    assert main([*RUN[:4], "2", *RUN[5:], "--nproc", "2", "--out", str(out)]) == 0
    assert sorted(p.name for p in (out / "profiles" / "trial-0000").glob("rank*")) == [
        "rank0.pt.trace.json.gz",
        "rank1.pt.trace.json.gz",
    ]
    best = load_config(out / "best.yaml")
    assert best.provenance["world_size"] == 2 and best.provenance["samples_per_s"] > 0
    measured = [
        t for t in load_study(out, "gr00t_n16-tiny-quick").trials if measurement_of(t) is not None
    ]
    assert measured[0].number == 0 and {measurement_of(t).world_size for t in measured} == {2}


def test_bad_arguments_fail_with_one_line(tmp_path, capsys):
    assert main(["run", "--space", "nope", "--out", str(tmp_path)]) == 2
    assert "search space 'nope' is unknown; known spaces:" in capsys.readouterr().err
    assert main(["run", "--memory-budget", "lots", "--out", str(tmp_path)]) == 2
    assert "--memory-budget: 'lots' is not a size" in capsys.readouterr().err
    assert main(["run", "--time-budget", "soon", "--out", str(tmp_path)]) == 2
    assert "--time-budget: 'soon' is not a duration" in capsys.readouterr().err


def test_time_budget_stops_starting_trials(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main([*RUN, "--time-budget", "0.01s", "--out", str(out)]) == 0
    )  # each run measures at least one trial
    printed = capsys.readouterr().out
    assert (
        "time budget of 0 s: 0 s left after 1 trials of this run" in printed
        and "~0:00 left" in printed
    )
    assert len(load_study(out, "gr00t_n16-tiny-quick").trials) == 1 and (out / "best.yaml").exists()


def test_the_time_budget_stops_a_running_trial_and_queues_it_again(tmp_path, capsys):
    """The crashy workload's batch size 5 hangs: started with time left, it is stopped at the end of
    the budget, recorded as ``budget`` (not a hang), and queued for the next run.

    The budget is set from the stock trial's own duration, measured in a first run: a hang starts
    only when the time left exceeds a typical trial, and on a loaded machine the stock trial alone
    can take most of any fixed budget. The second run's first trial (never stopped: each run
    measures one) is a queued fp8 trial that the CPU refuses at once, so the hang starts next."""
    import time

    space = tmp_path / "hang.yaml"
    space.write_text(
        "knobs:\n  batch_size: {type: categorical, choices: [2, 5], group: data}\n"
        "  precision.regions.dit: {type: categorical, choices: [bf16, fp8], group: precision}\n"
    )
    out = tmp_path / "run"
    name = "tests.search.crashy.Workload-tiny-hang"
    argv = [
        "run",
        "--workload",
        "tests.search.crashy:Workload",
        "--preset",
        "tiny",
        "--space",
        str(space),
        "--trials",
        "1",
        "--synthetic",
        "--confirm-rounds",
        "0",
        "--converge-after",
        "0",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--profile-steps",
        "0",
        "--timeout-per-trial",
        "600",
        "--out",
        str(out),
    ]
    assert main(argv) == 0  # the stock trial (batch size 2)
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / "study.journal"))
    )
    study = optuna.load_study(study_name=name, storage=storage)
    (stock,) = study.trials
    budget = (stock.datetime_complete - stock.datetime_start).total_seconds() + 15
    study.enqueue_trial({"batch_size": 2, "precision.regions.dit": "fp8"})
    study.enqueue_trial({"batch_size": 5, "precision.regions.dit": "bf16"})
    capsys.readouterr()
    began = time.monotonic()
    assert main([*argv[:8], "4", *argv[9:], "--time-budget", f"{budget:.0f}s"]) == 0
    took = time.monotonic() - began
    trials = optuna.load_study(study_name=name, storage=storage).trials
    assert [t.state for t in trials] == [
        TrialState.COMPLETE,
        TrialState.FAIL,
        TrialState.FAIL,
        TrialState.WAITING,
    ]
    assert reason_of(trials[1]) == "config"
    assert (
        reason_of(trials[2]) == "budget"
        and "end of the time budget" in record_of(trials[2]).failure.error
    )
    assert trials[3].system_attrs["fixed_params"] == {
        "batch_size": 5,
        "precision.regions.dit": "bf16",
    }
    assert trials[3].user_attrs["queued_again_from"] == 2
    assert round(budget) <= took < budget + 25, (
        took,
        budget,
    )  # the hang ran to the budget's end, not to its 600 s timeout
    printed = capsys.readouterr().out
    assert "failed (budget)" in printed and "s left after 2 trials of this run" in printed
    assert load_config(out / "best.yaml").batch_size == 2


def test_a_terminated_run_leaves_no_trial_process_or_folder(tmp_path, monkeypatch):
    """SIGTERM to `autotune run` stops the trial in flight: its processes and temporary folder go,
    and the trial is recorded as interrupted and queued again."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    import psutil

    from tests.trialprocs import guard_of, trial_processes

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    # batch size 5 (the stock trial here) of the crashy workload hangs in its loader: surely in flight
    space = tmp_path / "hang.yaml"
    space.write_text("knobs:\n  batch_size: {type: categorical, choices: [2, 5], group: data}\n")
    argv = [
        sys.executable,
        "-m",
        "autotune",
        "run",
        "--workload",
        "tests.search.crashy:Workload",
        "--preset",
        "tiny",
        "--space",
        str(space),
        "--trials",
        "1",
        "--synthetic",
        "--confirm-rounds",
        "0",
        "--converge-after",
        "0",
        "--batch-size",
        "5",
        "--out",
        str(tmp_path / "run"),
    ]
    run = subprocess.Popen(argv, env=env, cwd=Path(__file__).parents[2])
    deadline = time.monotonic() + 120
    while not list(tmp.glob("autotune-run-*/config.yaml")) and time.monotonic() < deadline:
        time.sleep(0.2)
    folder = next(tmp.glob("autotune-run-*"))
    while not (workers := trial_processes(folder)) and time.monotonic() < deadline:
        time.sleep(0.2)  # a zygote's first trial waits for its imports
    time.sleep(2)  # the worker process is up
    session = guard_of(folder)  # forked from a zygote: its processes are the guard's session
    workers = trial_processes(folder, session)
    assert workers, "the trial's worker is running"
    helpers = [
        p.pid for p in psutil.Process(run.pid).children()
    ]  # a zygote, which must not outlive its tuner
    journal = tmp_path / "run" / "study.journal"
    before = journal.read_bytes()
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=60) == 128 + signal.SIGTERM
    assert journal.read_bytes().startswith(
        before
    )  # appended to (the trial's end), nothing before it changed
    assert not folder.exists()

    def running(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = (
        time.monotonic() + 10
    )  # the zygote ends when it reads its tuner's end, a moment after
    while any(map(running, helpers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = trial_processes(folder, session) + [p for p in helpers if running(p)]
    assert not left, f"trial processes left behind: {left}"

    # the trial in flight failed as interrupted, with the signal, and was queued again (row 7 of issue 18)
    name = "tests.search.crashy.Workload-tiny-hang"
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "run" / "study.journal"))
    )
    stopped, queued = optuna.load_study(study_name=name, storage=storage).trials
    assert stopped.state == TrialState.FAIL and reason_of(stopped) == "interrupted"
    assert (
        record_of(stopped).failure.error == "the tuner was stopped by SIGTERM while the trial ran"
    )
    assert queued.state == TrialState.WAITING and queued.user_attrs == {
        "stock": True,
        "queued_again_from": 0,
    }

    # the same command again measures it (the hang is over): the study has its stock baseline
    monkeypatch.setenv("CRASHY_HANG_S", "0")
    again = [
        "run",
        "--workload",
        "tests.search.crashy:Workload",
        "--preset",
        "tiny",
        "--space",
        str(space),
        "--trials",
        "1",
        "--synthetic",
        "--confirm-rounds",
        "0",
        "--converge-after",
        "0",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--profile-steps",
        "0",
        "--out",
        str(tmp_path / "run"),
    ]
    assert main(again) == 0
    trials = optuna.load_study(study_name=name, storage=storage).trials
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    assert (
        trials[1].params == {"batch_size": 5}
        and load_config(tmp_path / "run" / "best.yaml").provenance["stock_samples_per_s"]
    )


def test_a_changed_space_does_not_continue_the_study(tmp_path, capsys):
    space = tmp_path / "s.yaml"
    space.write_text(
        "knobs:\n  optimizer.impl: {type: categorical, choices: [foreach, fused], group: optimizer}\n"
    )
    argv = [
        "run",
        "--space",
        str(space),
        "--trials",
        "1",
        "--synthetic",
        "--confirm-rounds",
        "0",
        "--converge-after",
        "0",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--profile-steps",
        "0",
        "--out",
        str(tmp_path / "run"),
    ]
    assert main(argv) == 0
    space.write_text(
        "knobs:\n  optimizer.impl: {type: categorical, choices: [foreach, fused, loop], group: optimizer}\n"
    )
    assert main([*argv[:4], "2", *argv[5:]]) == 2
    err = capsys.readouterr().err
    assert (
        "knobs.optimizer.impl: choices ['foreach', 'fused'] then, ['foreach', 'fused', 'loop'] now"
        in err
        and len(err.strip().splitlines()) == 1
    )


def test_base_configuration_is_trial_0(tmp_path):
    """--base: the study starts from the user's configuration instead of the stock one."""
    base = tmp_path / "mine.yaml"
    base.write_text("preset: tiny\nbatch_size: 3\noptimizer: {impl: fused}\n")
    out = tmp_path / "run"
    argv = [
        "run",
        "--base",
        str(base),
        "--space",
        "quick",
        "--trials",
        "1",
        "--synthetic",
        "--confirm-rounds",
        "0",
        "--converge-after",
        "0",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--profile-steps",
        "0",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    best = load_config(out / "best.yaml")
    assert best.batch_size == 3 and best.optimizer.impl == "fused"
    assert (
        best.provenance["study"] == "gr00t_n16-tiny-quick-mine"
        and best.provenance["speedup_vs_stock"] == 1.0
    )


def test_a_faster_reference_is_neither_the_incumbent_nor_the_best():
    import optuna
    from optuna.distributions import FloatDistribution

    from autotune.search.trials import best_trial

    study = optuna.create_study(direction="maximize")
    dist = {"x": FloatDistribution(0, 1)}
    for value, attrs in (
        (10.0, {"stock": True}),
        (50.0, {"reference": "compile.regions=[all]"}),
        (20.0, {}),
    ):
        study.add_trial(
            optuna.trial.create_trial(
                params={"x": 0.5},
                distributions=dist,
                value=value,
                user_attrs={"constraint": -0.5, **attrs},
            )
        )
    assert best_trial(study).value == 20.0
