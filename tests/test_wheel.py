"""The wheel on its own: built from the source, installed into a fresh virtual environment (not
editable, no repository on the path), it runs a two-trial tiny study from an empty folder.

uv (the test extra) builds the sdist, the wheel from the sdist, and installs it with its dependencies:
torch as the local CPU build that this environment runs (pip's ``find-links``), the rest from the
package index through uv's cache.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from autotune.config import load_config

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ["autotune", "search_spaces", "pyproject.toml", "README.md"]  # what the build reads
STUDY = [
    "run",
    "--preset",
    "tiny",
    "--space",
    "quick",
    "--trials",
    "2",
    "--synthetic",
    "--confirm-rounds",
    "0",
    "--converge-after",
    "0",
    "--steps",
    "2",
    "--warmup",
    "1",
]
RUN_DIR = Path("runs/gr00t_n16-tiny-quick")  # the default run folder of STUDY
RUN_FILES = {"best.yaml", "report.html", "study.journal", "trials.csv", "diagnosis.json"}
"""Files of a run folder: the example runs of the checkout stay out of the wheel."""


def uv_binary() -> str:
    try:
        from uv import find_uv_bin
    except ImportError:
        missing = "uv is not installed (pip install -e '.[test]')"
        pytest.fail(missing) if os.environ.get("CI") else pytest.skip(missing)
    return find_uv_bin()


def find_links() -> list[str]:
    """Where pip finds local wheels (the CPU torch lies there): its ``find-links`` settings."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    ).stdout
    dirs = [d for value in re.findall(r"find-links='([^']*)'", listed) for d in value.split()]
    dirs += os.environ.get("PIP_FIND_LINKS", "").split()
    return list(dict.fromkeys(dirs))


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def test_the_wheel_runs_a_tiny_study_from_an_empty_folder(tmp_path):
    uv = uv_binary()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    src = tmp_path / "src"
    for name in SOURCE:  # a copy, so that the build's files (egg-info) stay out of the checkout
        if (ROOT / name).is_dir():
            shutil.copytree(
                ROOT / name,
                src / name,
                symlinks=True,
                ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
            )
        else:
            shutil.copy2(ROOT / name, src / name)
    run([uv, "build", "-q", "--out-dir", str(tmp_path / "dist"), str(src)], tmp_path, env)
    (wheel,) = (tmp_path / "dist").glob("autotune-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    runs = [n for n in names if n.startswith("reports/") or Path(n).name in RUN_FILES]
    assert not runs, f"the wheel carries run folders: {runs[:5]}"

    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    run([uv, "venv", "-q", "--python", sys.executable, str(venv)], tmp_path, env)
    links = [arg for d in find_links() for arg in ("--find-links", d)]
    assert links, "pip has no find-links folder: the local CPU build of torch cannot be found"
    # the exact local build of torch (2.13.0+cpu): an unpinned one would be a multi-GB CUDA build
    run(
        [
            uv,
            "pip",
            "install",
            "-q",
            "--python",
            str(python),
            *links,
            f"torch=={torch.__version__}",
            str(wheel),
        ],
        tmp_path,
        env,
    )

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "mine.yaml").write_text(
        "knobs:\n  optimizer.impl: {type: categorical, choices: [foreach, fused], group: optimizer}\n"
    )
    where = run(
        [
            str(python),
            "-c",
            "import autotune, autotune.search.space as s; "
            "print(autotune.__file__); print(s.spaces_dir()); print(s.list_spaces()); print(s.load_space('mine.yaml').name)",
        ],
        empty,
        env,
    ).splitlines()
    site = (venv / "lib").resolve()
    assert Path(where[0]).resolve().is_relative_to(site) and Path(
        where[1]
    ).resolve().is_relative_to(site), where
    assert {"quick", "gr00t_n16"} <= set(eval(where[2])) and where[
        3
    ] == "mine"  # names, and a user's file by path

    out = run([str(venv / "bin" / "autotune"), *STUDY], empty, env)
    run_dir = empty / RUN_DIR
    assert f"best configuration: {RUN_DIR / 'best.yaml'}" in out, out
    for name in (
        "best.yaml",
        "report.html",
        "trials.csv",
        "parity.json",
        "diagnosis.json",
        "study.journal",
    ):
        assert (run_dir / name).is_file(), name
    assert (
        load_config(run_dir / "best.yaml").preset == "tiny"
    )  # what `autotune train --config` reads
    with (run_dir / "trials.csv").open() as f:
        assert [row["state"] for row in csv.DictReader(f)] == ["COMPLETE", "COMPLETE"]
    assert "<!DOCTYPE html>" in (run_dir / "report.html").read_text()[:100]
