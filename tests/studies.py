"""Run folders of real tiny CPU studies, made once per test session and shared by the report and study
tests (``tests/conftest.py`` offers the fixtures to every test).

A test that only reads a finished study takes its folder; a test that changes it (runs it again,
damages its journal) works on ``copy_of`` it, so every test sees the study as the run left it.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
from pathlib import Path

import optuna
import pytest

from autotune.cli import main
from tests.hostshare import made_once

REFERENCE = "optimizer.impl=fused"
QUICK = [
    "run",
    "--space",
    "quick",
    "--trials",
    "3",
    "--synthetic",
    "--confirm-rounds",
    "0",
    "--converge-after",
    "0",
    "--steps",
    "2",
    "--warmup",
    "1",
    "--batch-size",
    "2",
    "--seed",
    "1",
    "--reference",
    REFERENCE,
]
QUICK_DIR = Path("runs/gr00t_n16-tiny-quick")  # the default run folder of QUICK, relative
QUICK_STUDY = "gr00t_n16-tiny-quick"
PRINTED = "printed.txt"  # what QUICK printed, beside (not inside) its run folder
CRASHY = "tests.search.crashy:Workload"
CRASHY_STUDY = "tests.search.crashy.Workload-tiny-fail"


def journal(out: Path) -> optuna.storages.JournalStorage:
    return optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / "study.journal"))
    )


def copy_of(run: Path, tmp_path: Path) -> Path:
    """A private copy of a shared run folder, for a test that changes it."""
    return Path(shutil.copytree(run, tmp_path / "run"))


class _Tee(io.TextIOBase):
    """Writes to a buffer and on to the process's own stdout: pytest's capture of the whole session shows a
    failed run's output, and no test's ``capsys`` receives what the shared run printed."""

    def __init__(self, stream) -> None:
        self.buffer_ = io.StringIO()
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(text)
        return self.buffer_.write(text)

    def flush(self) -> None:
        self.stream.flush()


def run_printing(argv: list[str], printed: Path) -> None:
    """``main(argv)``, asserting exit 0, with what it printed kept in the file ``printed``."""
    tee = _Tee(sys.__stdout__)
    try:
        with contextlib.redirect_stdout(tee):
            assert main(argv) == 0
    finally:
        printed.write_text(tee.buffer_.getvalue())


def _make_quick(home: Path) -> None:
    cwd = os.getcwd()
    os.chdir(home)
    try:
        run_printing(QUICK, home / PRINTED)
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory) -> Path:
    """``autotune run`` of the quick space on the CPU: the stock trial, a reference (fused AdamW), one sampled.

    Started as a user starts it, in a folder of its own without ``--out``: the run folder is the default,
    relative ``runs/gr00t_n16-tiny-quick`` (the report's links must not depend on where the run started).
    What it printed is kept two folders up (``quick_run_printed``). One run for all xdist workers.
    """
    return made_once(tmp_path_factory, "quick", _make_quick) / QUICK_DIR


@pytest.fixture(scope="session")
def quick_run_printed(quick_run) -> str:
    """What ``autotune run`` printed while it made ``quick_run``."""
    return (quick_run.parents[1] / PRINTED).read_text()


def _make_failed(root: Path) -> None:
    space = root / "fail.yaml"
    space.write_text(
        "knobs:\n  batch_size: {type: categorical, choices: [2, 3, 4, 5], group: data}\n"
        "  precision.regions.dit: {type: categorical, choices: [bf16, fp8], group: precision}\n"
    )
    out = root / "run"
    out.mkdir()
    study = optuna.create_study(study_name=CRASHY_STUDY, storage=journal(out), direction="maximize")
    study.enqueue_trial(
        {"batch_size": 2, "precision.regions.dit": "bf16"}, user_attrs={"stock": True}
    )
    study.enqueue_trial({"batch_size": 3, "precision.regions.dit": "bf16"})
    study.enqueue_trial({"batch_size": 2, "precision.regions.dit": "fp8"})
    study.enqueue_trial({"batch_size": 4, "precision.regions.dit": "bf16"})
    argv = [
        "run",
        "--workload",
        CRASHY,
        "--preset",
        "tiny",
        "--space",
        str(space),
        "--trials",
        "4",
        "--synthetic",
        "--confirm-rounds",
        "0",
        "--converge-after",
        "0",
        "--steps",
        "4",
        "--warmup",
        "1",
        "--timeout-per-trial",
        "60",
        "--profile-steps",
        "0",
        "--out",
        str(out),
    ]
    run_printing(argv, root / PRINTED)


@pytest.fixture(scope="session")
def failed_run(tmp_path_factory) -> Path:
    """#0 stock, #1 crashes (batch size 3), #2 is refused (fp8 is not a choice on a CPU), #3 is pruned (batch size 4 sleeps).

    Batch size 5 (it hangs) is a choice of the space, for a test that runs the study on (``copy_of``).
    One run for all xdist workers."""
    return made_once(tmp_path_factory, "failed", _make_failed) / "run"


@pytest.fixture(scope="session")
def failed_run_printed(failed_run) -> str:
    """What ``autotune run`` printed while it made ``failed_run``."""
    return (failed_run.parent / PRINTED).read_text()


def accumulating(workload: str, batch: int, steps: int = 1):
    """A tiny CPU configuration of ``workload`` on synthetic data: ``batch`` samples an update in
    ``steps`` micro-batches."""
    from autotune.config import config_from_dict

    return config_from_dict(
        {
            "workload": workload,
            "preset": "tiny",
            "batch_size": batch,
            "device": "cpu",
            "data": {"source": "synthetic"},
            "memory": {"accumulation_steps": steps},
        }
    )


def measured_peak(tmp_path: Path, workload: str, batch: int, steps: int) -> int:
    """The allocated peak of a short real run of :func:`accumulating`'s configuration."""
    from autotune.train.trial.launch import launch

    cfg = accumulating(workload, batch, steps)
    record = launch(cfg, steps=2, warmup=1, timeout=240, log_path=tmp_path / f"k{steps}.log")
    assert record.failure is None, record.failure
    return record.measurement.memory.allocated_bytes


def study_options(argv: list[str]):
    """The :class:`~autotune.search.options.StudyOptions` ``autotune run ARGV`` would study with
    (``argv`` begins with ``run``), for a test that opens the study without running it."""
    from autotune.cli import build_parser
    from autotune.config.compat import Machine
    from autotune.search.cli import options
    from autotune.search.space import load_space

    args = build_parser("run").parse_args(argv)
    if args.space:
        args.space = load_space(args.space)
    return options(args, Machine.current(world_size=1))
