"""``python -m autotune report`` on bad input: one line naming the folder and what to give instead."""

from __future__ import annotations

import subprocess
import sys

from autotune.cli import main


def test_not_a_folder(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"autotune: error: {tmp_path / 'nope'}: not a folder; give the run folder of `autotune run` (it holds study.journal)\n"
    )


def test_a_folder_without_a_study(tmp_path, capsys):
    (tmp_path / "trials.csv").write_text("number\n")
    assert main(["report", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(
        f"autotune: error: {tmp_path}: no study in it (no study.journal"
    )
    assert not (tmp_path / "study.journal").exists() and not (tmp_path / "report.html").exists()


def test_the_command_line_prints_one_line_and_exits_2(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "report", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "no study in it" in done.stderr
