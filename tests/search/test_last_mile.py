"""What a new user of ``autotune run`` on a CPU sees from the first line to the last: the data said
at the start, no third-party noise, a study that stops when its stock trial cannot run, and the
fine-tuning command at the end, with a ``best.yaml`` that works from any folder."""

from __future__ import annotations

import json
import re
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.cli import main
from autotune.config import DataConfig, load_config
from autotune.search.trials import reason_of
from tests.clirun import ROOT, autotune

pytestmark = pytest.mark.slow

QUICK = ["--confirm-rounds", "0", "--converge-after", "0", "--steps", "1", "--warmup", "1"]
NOISE = re.compile(
    r"Failed to load .*\.so|is an Enum subclass|USDT|profiler_start|broadcast_buffers"
)
"""torchao's kernel loads, torch's _pytree deprecation, kineto's trace points, DDP's FutureWarning."""

MINE = """
from autotune.workloads.hf_causal_lm import HFCausalLM


class Mine(HFCausalLM):
    name = "mine"
"""


def test_a_cpu_run_says_its_data_prints_no_noise_and_ends_with_the_finetune_command(tmp_path):
    """A workload file given by a relative path, importing transformers (and so torchao)."""
    (tmp_path / "mine.py").write_text(MINE)
    proc = autotune(
        "run", "--workload", "mine.py:Mine", "--trials", "1", "--out", "out", *QUICK,
        "--profile-steps", "0", cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    printed = proc.stdout + proc.stderr
    assert not NOISE.search(printed), [line for line in printed.splitlines() if NOISE.search(line)]
    lines = proc.stdout.strip().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("study "))
    assert lines[header + 1] == "data: the workload's own 'tokens' data (not a dataset folder)"
    best = (tmp_path / "out" / "best.yaml").resolve()
    command = (
        f"python -m autotune train --config {best} --max-steps 20000 --save-steps 1000 "
        f"--output-dir {best.parent / 'finetune'}"
    )
    assert lines[-1] == f"  {command}", lines[-3:]
    assert lines[-2].startswith("fine-tune with it (20000 steps: ~")
    page = (tmp_path / "out" / "report.html").read_text()
    assert command in page and "Fine-tune with it" in page
    # best.yaml names the workload file by its absolute path: it trains from any other folder
    assert load_config(best).workload == f"{tmp_path / 'mine.py'}:Mine"
    trained = autotune("train", "--config", best, "--steps", "1", "--warmup", "0", cwd=ROOT)
    assert trained.returncode == 0, trained.stderr
    assert not NOISE.search(trained.stdout + trained.stderr)


def test_dataset_on_run_and_train_is_the_data_said_and_reported(tmp_path, capsys):
    from autotune.workloads import get_workload

    dataset = get_workload("gr00t_n16").data_folder("tiny", DataConfig())  # a LeRobot v2.1 folder
    out = tmp_path / "run"
    argv = ["run", "--trials", "1", "--dataset", str(dataset), "--out", str(out), *QUICK]
    assert main([*argv, "--profile-steps", "0"]) == 0
    printed = capsys.readouterr().out
    line = (
        f"data: lerobot {dataset} (LeRobot v2.1, 8 episodes): 2 views (front, wrist), "
        "state 8 / action 7 dims"
    )
    assert line in printed.splitlines(), printed
    assert json.loads((out / "run.json").read_text())["data"]["dataset"] == str(dataset)
    assert line in (out / "report.html").read_text()
    assert load_config(out / "best.yaml").data.dataset == str(dataset)
    # train takes it too; a folder that is not there is one line
    assert main(["train", "--dataset", str(dataset), "--steps", "1", "--warmup", "0"]) == 0
    assert main(["train", "--dataset", str(tmp_path / "nope"), "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"autotune: error: --dataset {tmp_path / 'nope'}: not a folder; give a LeRobot dataset "
        "folder (`python -m autotune data check DIR` checks one)"
    ]


def _modality_cut_short(meta: Path) -> str:
    (meta / "modality.json").write_text('{"state": [1, 2')
    return f"{meta / 'modality.json'}: not a readable JSON file"


def _embodiment_99(meta: Path) -> str:
    info = json.loads((meta / "info.json").read_text())
    info["embodiment"]["id"] = 99
    (meta / "info.json").write_text(json.dumps(info))
    return f"{meta / 'info.json'}: embodiment id 99 is not in [0, 32)"


@pytest.mark.parametrize(
    "break_it",
    [
        _modality_cut_short,
        _embodiment_99,
    ],
    ids=["modality.json", "embodiment"],
)
def test_a_broken_dataset_of_the_user_is_refused_before_the_study_is_written(
    tmp_path, capsys, break_it
):
    """A copy of the made dataset with an unreadable ``modality.json``, or a projector slot the
    preset does not have: one line naming the file, exit 2, no study folder (its stock trial would
    only have failed alike, after building the model)."""
    import shutil

    from autotune.workloads import get_workload

    made = get_workload("gr00t_n16").data_folder("tiny", DataConfig())
    dataset = tmp_path / "mine"
    shutil.copytree(made, dataset)
    said = break_it(dataset / "meta")
    out = tmp_path / "run"
    argv = ["run", "--trials", "2", "--dataset", str(dataset), "--out", str(out), *QUICK]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"autotune: error: {said}"), err
    assert err[0].endswith(f"`autotune data check {dataset}` finds its first problem")
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "reason", "fix"),
    [
        (["--batch-size", "3"], "error", "fix the workload or its data as the log says"),
        (
            ["--preset", "full", "--timeout-per-trial", "1"],
            "timeout",
            "on a CPU use the tiny preset (--preset tiny)",
        ),
    ],
)
def test_a_study_whose_stock_trial_cannot_run_stops_with_the_fix(
    tmp_path, capsys, extra, reason, fix
):
    """The crashy workload's batch size 3 crashes; the full preset on a CPU does not finish its
    first trial in time. Either way the study stops after its stock trial, not after --trials."""
    space = tmp_path / "s.yaml"
    space.write_text(
        "knobs:\n  optimizer.impl: {type: categorical, choices: [foreach, fused], group: optimizer}\n"
    )
    out = tmp_path / "run"
    argv = [
        "run", "--workload", "tests.search.crashy:Workload", "--space", str(space), "--trials", "4",
        "--synthetic", "--profile-steps", "0", "--out", str(out), *QUICK, *extra,
    ]  # fmt: skip
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and f"the stock trial (#0) failed ({reason}): " in err[0], err
    assert fix in err[0] and "then run the same command again" in err[0]
    if reason == "timeout":  # the CPU guidance at the start, before any trial ran
        assert "note: preset full on a CPU takes minutes a trial" in captured.out
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / "study.journal"))
    )
    (study,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=study.study_name, storage=storage).trials
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    assert reason_of(trials[0]) == reason
    assert trials[1].user_attrs == {"stock": True, "queued_again_from": 0}
    assert (out / "report.html").is_file() and (out / "trials.csv").is_file()


def test_a_resumed_job_says_so_first_and_neither_its_profile_nor_its_ranks_print_noise(tmp_path):
    """The job's throughput watch profiles a window (kineto in the job's own process) when a step
    runs below best.yaml's provenance, here set out of reach; two ranks build DDP."""
    config = tmp_path / "c.yaml"
    config.write_text(
        "preset: tiny\ndata: {source: synthetic}\nprovenance: {samples_per_s: 1000000.0}\n"
    )
    job = tmp_path / "job"
    common = ["--config", config, "--output-dir", job, "--no-progress", "--log-steps", "1"]
    first = autotune("train", *common, "--max-steps", "2", "--save-steps", "2", timeout=300)
    assert first.returncode == 0, first.stderr
    assert "resuming" not in first.stderr
    again = autotune("train", *common, "--max-steps", "12", timeout=300)
    assert again.returncode == 0, again.stderr
    said = [line for line in again.stderr.splitlines() if line.startswith("autotune: ")]
    assert said[0] == f"autotune: resuming from {job / 'checkpoint-2'} (step 2 of 12 done)", said
    assert any("(profile of steps" in line for line in said), said  # the window was profiled
    assert not NOISE.search(again.stdout + again.stderr), again.stderr
    ranks = autotune(
        "train", "--preset", "tiny", "--synthetic", "--nproc", "2", "--max-steps", "2",
        "--output-dir", tmp_path / "ddp", "--no-progress", timeout=300,
    )  # fmt: skip
    assert ranks.returncode == 0, ranks.stderr
    assert not NOISE.search(ranks.stdout + ranks.stderr), ranks.stderr


def test_a_memory_cap_left_in_the_tuners_environment_is_not_the_studys(tmp_path, monkeypatch):
    """Trials get the study's cap (here none), not a value the shell exported: 1 KiB would fail
    every trial as out of memory."""
    from autotune.train.memcap import BUDGET_ENV

    monkeypatch.setenv(BUDGET_ENV, "1KiB")
    out = tmp_path / "run"
    argv = ["run", "--trials", "1", "--synthetic", "--profile-steps", "0", "--out", str(out)]
    assert main([*argv, *QUICK]) == 0
    assert load_config(out / "best.yaml").workload == "gr00t_n16"


def test_a_run_with_torch_compile_turned_off_says_so_first(tmp_path, monkeypatch, capsys):
    from autotune.config.compat import compile_turned_off

    assert compile_turned_off({"TORCHDYNAMO_DISABLE": "0", "TORCH_COMPILE_DISABLE": ""}) is None
    monkeypatch.setenv("TORCHDYNAMO_DISABLE", "1")
    out = tmp_path / "run"
    argv = ["run", "--trials", "1", "--synthetic", "--profile-steps", "0", "--out", str(out)]
    assert main([*argv, *QUICK]) == 0
    lines = capsys.readouterr().out.splitlines()
    note = next(i for i, x in enumerate(lines) if x.startswith("note: TORCHDYNAMO_DISABLE=1 in"))
    assert "compile knobs measure as eager" in lines[note]
    assert note < next(i for i, x in enumerate(lines) if x.startswith("study "))  # before a trial
