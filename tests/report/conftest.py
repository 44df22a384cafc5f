"""Run folders of real tiny CPU studies, made once per test session and shared by the report tests."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import optuna
import pytest

from autotune.cli import main

from .browser import CHROMIUM

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
CRASHY = "tests.search.crashy:Workload"
CRASHY_STUDY = "tests.search.crashy.Workload-tiny-fail"


def journal(out: Path) -> optuna.storages.JournalStorage:
    return optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / "study.journal"))
    )


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory) -> Path:
    """``autotune run`` of the quick space on the CPU: the stock trial, a reference (fused AdamW), one sampled.

    Started as a user starts it, in a folder of its own without ``--out``: the run folder is the default,
    relative ``runs/gr00t_n16-tiny-quick`` (the report's links must not depend on where the run started).
    """
    home = tmp_path_factory.mktemp("quick")
    cwd = os.getcwd()
    os.chdir(home)
    try:
        assert main(QUICK) == 0
    finally:
        os.chdir(cwd)
    return home / QUICK_DIR


@pytest.fixture(scope="session")
def failed_run(tmp_path_factory) -> Path:
    """#0 stock, #1 crashes (batch size 3), #2 is refused (fp8 is not a choice on a CPU), #3 is pruned (batch size 4 sleeps)."""
    root = tmp_path_factory.mktemp("failed")
    space = root / "fail.yaml"
    space.write_text(
        "knobs:\n  batch_size: {type: categorical, choices: [2, 3, 4], group: data}\n"
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
    assert main(argv) == 0
    return out


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """Debian's chromium (.ci/run installs it); in CI a missing browser fails rather than skips."""
    missing = (
        "chromium is not installed (apt-get install -y chromium)" if CHROMIUM is None else None
    )
    if importlib.util.find_spec("websocket") is None:
        missing = "websocket-client is not installed (pip install -e '.[test]')"
    if missing:
        pytest.fail(missing) if os.environ.get("CI") else pytest.skip(missing)
    return CHROMIUM
