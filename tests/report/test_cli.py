"""``python -m autotune report`` on bad input: one line naming the folder and what to give instead."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cli import main

H200 = Path(__file__).parents[2] / "reports" / "examples" / "full-1gpu-h200"  # a real study


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


SECRET = "2024#Spring?@/x"


def test_a_run_json_naming_a_database_is_never_connected_to(tmp_path, monkeypatch):
    """A folder someone hands over is data: the database its run.json names is quoted (redacted) in
    the one line that asks for --storage, and not connected to (no $PGPASSWORD sent anywhere)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        port = server.getsockname()[1]
        url = f"postgresql://victim:{SECRET}@127.0.0.1:{port}/x"
        (tmp_path / "run.json").write_text(json.dumps({"study_name": "s", "storage": url}))
        monkeypatch.setenv("PGPASSWORD", "the-users-own")
        monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
        done = subprocess.run(
            [sys.executable, "-m", "autotune", "report", str(tmp_path)],
            capture_output=True,
            text=True,
        )
        with pytest.raises(TimeoutError):
            server.accept()  # nobody knocked
    assert done.returncode == 2 and done.stdout == "", done.stderr
    (line,) = done.stderr.splitlines()
    assert line == (
        f"autotune: error: {tmp_path}: its run.json says the study is in the database "
        f"postgresql://victim:***@127.0.0.1:{port}/x; a run folder never chooses a database to connect "
        "to: give the URL yourself (autotune report RUN_DIR --storage URL, or $AUTOTUNE_STORAGE)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_a_sqlite_url_in_run_json_creates_no_file(tmp_path, capsys, monkeypatch):
    elsewhere = tmp_path / "elsewhere" / "chosen.db"
    elsewhere.parent.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"storage": f"sqlite:///{elsewhere}"}))
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    assert main(["report", str(run)]) == 2
    assert "a run folder never chooses a database" in capsys.readouterr().err
    assert not elsewhere.exists() and sorted(p.name for p in run.iterdir()) == ["run.json"]


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_sqlite_url_to_no_file_is_refused_not_created(tmp_path, capsys, monkeypatch, how):
    """A mistyped --storage sqlite:///path made an empty database there, then found no study in it."""
    run = tmp_path / "run"
    run.mkdir()
    typo = tmp_path / "stuyd.db"
    url = f"sqlite:///{typo}"
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    if how == "env":
        monkeypatch.setenv("AUTOTUNE_STORAGE", url)
    assert main(["report", str(run), *(["--storage", url] if how == "flag" else [])]) == 2
    source = "$AUTOTUNE_STORAGE" if how == "env" else "--storage"  # what the user gave
    assert capsys.readouterr().err == (
        f"autotune: error: {source} {url}: no database file {typo}; give the file the study is "
        "kept in (a report creates no database)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"] and not any(run.iterdir())


@pytest.mark.parametrize("name", ["study.journal", "best.yaml", "run.json"])
def test_out_never_replaces_a_file_that_is_not_a_page(tmp_path, capsys, name):
    """A tab-completed ``--out RUN_DIR/study.journal`` overwrote the study with the page."""
    run = Path(shutil.copytree(H200, tmp_path / "run"))
    before = (run / name).read_bytes()
    assert main(["report", str(run), "--out", str(run / name)]) == 2
    assert capsys.readouterr().err == (
        f"autotune: error: --out {run / name}: exists and is not an HTML page; a report replaces a "
        "page, never another file (give a new file)\n"
    )
    assert (run / name).read_bytes() == before


def test_out_replaces_an_empty_file_and_a_page(tmp_path):
    page = tmp_path / "page.html"
    page.write_text("")
    assert main(["report", str(H200), "--out", str(page)]) == 0
    assert main(["report", str(H200), "--out", str(page)]) == 0  # the page it wrote
