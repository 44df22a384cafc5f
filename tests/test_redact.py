"""Secrets redacted by construction: a database password, whatever its characters, is written to no
file and printed on no line (run.json, run.lock, error lines; report.html in tests/report)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, unquote

import pytest
import yaml

from autotune.cli import main
from autotune.config.compat import Machine
from autotune.redact import (
    StorageURL,
    environment_secrets,
    hide_secrets,
    redact,
    redact_argv,
    scrub,
    secrets_of,
)
from autotune.search import cli as search_cli
from autotune.search.output import write_run_info
from tests.clirun import ROOT, one_line_error

PASSWORDS = ["2024#Spring", "a?b", "p@ss@word", "a/b", "p%40ss%23", "x:y", "hunter2", "&sslmode=x"]


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize(
    "template, shown",
    [
        ("postgresql://u:{pw}@db.example:5432/tune", "postgresql://u:***@db.example:5432/tune"),
        ("postgresql://u:{pw}@h/tune?sslmode=require", "postgresql://u:***@h/tune?sslmode=require"),
        ("postgresql+psycopg://:{pw}@h/tune", "postgresql+psycopg://:***@h/tune"),
        ("postgresql://u@h/tune?password={pw}", "postgresql://u@h/tune?password=***"),
        ("postgresql://u@h/tune?sslpassword={pw}&a=1", "postgresql://u@h/tune?sslpassword=***&a=1"),
    ],
)
def test_a_password_of_any_characters_is_hidden(password, template, shown):
    if "=" in template and "&" in password:  # in a query value a raw "&" starts the next key
        password = quote(password, safe="")
    url = template.format(pw=password)
    assert redact(url) == shown
    assert password not in redact(url) and password in secrets_of(url)
    assert unquote(password) not in redact(url) and unquote(password) in secrets_of(url)
    assert scrub(f'FATAL: password "{password}" for user u failed', url) == (
        'FATAL: password "***" for user u failed'
    )


@pytest.mark.parametrize(
    "url, shown",
    [  # odd URLs: more than the password may go, never a piece of it
        ("postgresql://u@h:5432/db?password=p@ss", "postgresql://u@h:***"),
        ("postgresql://u:a?password=b@h/db", "postgresql://u:***"),
        ("postgresql://u:x@y?z@h/db", "postgresql://u:***@h/db"),
        ("u:pw@h/db", "***@h/db"),
        ("host=h password=2024#Spring", "host=h password=***"),
    ],
)
def test_an_odd_url_loses_more_than_its_password(url, shown):
    assert redact(url) == shown


def test_the_url_object_shows_only_the_redacted_form():
    url = StorageURL("postgresql://u:2024#Spring@h/db")
    shown = "postgresql://u:***@h/db"
    assert str(url) == f"{url}" == f"{url:>5}" == shown and repr(url) == f"StorageURL({shown!r})"
    assert url.secret() == "postgresql://u:2024#Spring@h/db"
    with pytest.raises(TypeError):  # a record cannot store the object itself, only str(url)
        json.dumps({"storage": url})
    with pytest.raises(yaml.representer.RepresenterError):
        yaml.safe_dump({"storage": url})


def test_a_command_line_keeps_no_password():
    argv = [
        "autotune",
        "run",
        "--storage",
        "postgresql://u:2024#Spring@h/db",
        "--storage=sqlite://u:p@/x",
    ]
    assert redact_argv(argv) == [
        "autotune",
        "run",
        "--storage",
        "postgresql://u:***@h/db",
        "--storage=sqlite://u:***@/x",
    ]


def test_run_json_keeps_the_url_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_STORAGE", "postgresql://u:2024#Spring@127.0.0.1:1/x")
    parser = search_cli.argparse.ArgumentParser()
    search_cli.register(parser.add_subparsers())
    args = parser.parse_args(["run", "--synthetic", "--out", str(tmp_path / "run")])
    opts = search_cli.options(args, Machine.current())
    assert "2024" not in repr(opts)
    write_run_info(opts, finished=False)
    text = (tmp_path / "run" / "run.json").read_text()
    assert (
        json.loads(text)["storage"] == "postgresql://u:***@127.0.0.1:1/x" and "Spring" not in text
    )


@pytest.mark.parametrize("given", ["env", "flag"])
def test_a_study_that_cannot_open_its_database_writes_and_prints_no_secret(tmp_path, given):
    """The password of ``--storage`` or ``$AUTOTUNE_STORAGE`` is in no line and no file of the run folder
    (run.lock, run.json), whatever its characters."""
    secret = "2024#Spring?/@x"
    url = f"postgresql://tuner:{secret}@127.0.0.1:1/x"
    out = tmp_path / "run"
    argv = ["run", "--synthetic", "--trials", "1", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if given == "env":
        env["AUTOTUNE_STORAGE"] = url
    else:
        argv += ["--storage", url]
    done = subprocess.run(
        [sys.executable, "-m", "autotune", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    line = one_line_error(done)
    source = "$AUTOTUNE_STORAGE" if given == "env" else "--storage"  # what the user gave
    assert line.startswith(
        f"autotune: error: {source} postgresql://tuner:***@127.0.0.1:1/x: cannot open the database:"
    ), line
    for part in ("2024", "Spring", secret):
        assert part not in done.stdout + done.stderr
        for path in Path(out).rglob("*"):
            assert not path.is_file() or part not in path.read_text(errors="replace"), path


def test_the_lock_names_its_owner_without_the_password(tmp_path, monkeypatch):
    from autotune.ownership import own_folder

    argv = [
        "autotune",
        "run",
        "--storage",
        "postgresql://u:2024#Spring@h/db",
        "--out",
        str(tmp_path),
    ]
    monkeypatch.setattr(sys, "argv", argv)
    with own_folder(tmp_path, "autotune run", "--out"):
        lock = tmp_path / "run.lock"
        assert lock.stat().st_mode & 0o777 == 0o600
        owner = json.loads(lock.read_text())
        assert owner["pid"] == os.getpid() and "Spring" not in lock.read_text()
        assert (
            owner["command"] == f"autotune run --storage postgresql://u:***@h/db --out {tmp_path}"
        )
    assert not lock.exists()  # it does not outlive its owner


def test_a_failed_runs_words_lose_the_environments_secrets():
    env = {
        "HF_TOKEN": "hf_aB3dE5gH7jK9",
        "WANDB_API_KEY": "0123456789abcdef",
        "AUTOTUNE_STORAGE": "postgresql://u:2024#Spring@h/db",
        "DEBUG_TOKEN_LOG": "1",  # a flag, not a secret: "1" stays in every number
        "HOME": "/home/user",
    }
    text = "hub hf_aB3dE5gH7jK9, wandb 0123456789abcdef, db 2024#Spring, 1 step, /home/user"
    hidden = hide_secrets(text, environment_secrets(env))
    assert hidden == "hub ***, wandb ***, db ***, 1 step, /home/user"


@pytest.mark.parametrize(
    "argv, shown",
    [
        (["data", "check", "https://user:hunter2secret@hub.example.com/ds"], "https:/user:***@hub"),
        (["report", "s3://AKIAX:wJalr@XUtnFEMI@bucket/run"], "s3:/AKIAX:***@bucket/run"),
        (["train", "--config", "/x/postgresql://u:pw1234567@h/db.yaml"], "postgresql:/u:***@h"),
        (["train", "--config", "/x/hf_aB3dE5gH7jK9.yaml"], "/x/***.yaml"),
    ],
)
def test_an_error_line_repeats_no_password_the_user_typed(argv, shown, monkeypatch, capsys):
    """A path that holds a URL's password (pasted where a folder was asked), or the value of a
    secret of the environment: the one line names the path with the secret hidden."""
    monkeypatch.setenv("HF_TOKEN", "hf_aB3dE5gH7jK9")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("autotune: error: ") and shown in err and err.count("\n") == 1
    assert not any(s in err for s in ("hunter2secret", "XUtnFEMI", "pw1234567", "hf_aB3dE5gH7jK9"))


@pytest.mark.parametrize(
    "command, text, kind",
    [
        (
            ["train", "--steps", "1", "--config"],
            "localhost:5432:*:tuner:pgS3cretWord\n",
            "a string of 35",
        ),
        (["run", "--space"], "API_KEY=pgS3cretWord\n", "a string of 20"),
        (
            ["trainer-args", "--config"],
            "notes\n\nuser tuner\npassword pgS3cretWord\n",
            "a string of 38",
        ),
    ],
    ids=["pgpass-as-config", "env-file-as-space", "text-as-config"],
)
def test_a_wrong_file_handed_over_is_named_by_its_kind_never_echoed(
    tmp_path, command, text, kind, capsys
):
    """A credentials file or a page of text given where a configuration or a space goes: YAML reads
    it as one string, and the error line says what it is, not what it holds."""
    path = tmp_path / "given"
    path.write_text(text)
    assert main([*command, str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"autotune: error: {path}: ") and err.count("\n") == 1, err
    assert kind in err and "has the wrong type; allowed: a mapping" in err, err
    assert "pgS3cretWord" not in err and "tuner" not in err


@pytest.mark.timeout(60)
def test_a_long_word_that_ends_in_a_url_is_read_once():
    """A hostile word of 200,000 letters before a URL (a parameter name, a trial's output): the URL
    pattern tried every letter as the start of a scheme and scanned the whole run of letters from
    each; schemes are short, so a start is given up within 32 letters."""
    word = "x" * 200_000 + "@postgresql://u:s3cretpw@h/db"
    hidden = hide_secrets(word, [])
    assert "s3cretpw" not in hidden and hidden.endswith("@postgresql://u:***@h/db")
