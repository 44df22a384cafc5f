"""The README's complete workload, run exactly as printed there: a file of its own, named by path
from another folder, by module from its own, listed by ``inspect --list``, trained and tuned."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
AUTOTUNE = [sys.executable, "-m", "autotune"]


def readme_workload() -> str:
    block = re.search(
        r"<!-- workload-example -->\n```python\n(.*?)```\n<!-- /workload-example -->",
        README.read_text(),
        re.S,
    )
    assert block, "README.md lost its workload example"
    return block.group(1)


def test_the_example_is_complete_in_under_80_lines():
    assert len(readme_workload().splitlines()) < 80


@pytest.fixture(scope="module")
def workload_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mine")
    path = folder / "my_workload.py"
    path.write_text(readme_workload())
    return path


def run(args, cwd, timeout=600):
    env = {**os.environ, "AUTOTUNE_CACHE": str(Path(cwd) / "cache")}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_it_is_listed_by_path_and_by_module(workload_file, tmp_path):
    out = run(
        [*AUTOTUNE, "inspect", "--list", "--workload", f"{workload_file}:MyWorkload"], cwd=tmp_path
    )
    assert re.search(
        r"my_workload.py:MyWorkload \(workload 'my_cnn'\): presets \['small', 'large'\]", out
    )
    script = Path(sys.executable).with_name(
        "autotune"
    )  # the console script: no folder on the path of its own
    out = run(
        [str(script), "inspect", "--list", "--workload", "my_workload:MyWorkload"],
        cwd=workload_file.parent,
    )
    assert (
        "my_workload:MyWorkload (workload 'my_cnn')" in out
        and "data sources ['dataset', 'synthetic']" in out
    )


def test_it_is_tuned_and_its_best_yaml_trains_from_another_folder(workload_file, tmp_path):
    rel = os.path.relpath(
        workload_file, tmp_path
    )  # a relative path: the trial processes resolve it alike
    out = run(
        [
            *AUTOTUNE,
            "run",
            "--workload",
            f"{rel}:MyWorkload",
            "--trials",
            "2",
            "--confirm-rounds",
            "0",
            "--converge-after",
            "0",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--profile-steps",
            "1",
            "--stage-trials",
            "1",
        ],
        cwd=tmp_path,
    )
    assert "failed" not in out, out
    (best,) = (tmp_path / "runs").glob("*my_workload.py.MyWorkload-small-auto/best.yaml")
    text = best.read_text()
    assert (
        f"workload: {workload_file}:MyWorkload" in text  # absolute: it trains from anywhere
        and "source: dataset" in text
        and "episodes" not in text
        and "video_backend" not in text
    )
    out = run(
        [*AUTOTUNE, "train", "--config", str(best), "--steps", "1", "--warmup", "0", "--json"],
        cwd=tmp_path,
    )
    record = json.loads(out.strip().splitlines()[-1])
    losses = record.get("losses") or record["measurement"]["losses"]
    assert losses and all(0 < x < 10 for x in losses)
