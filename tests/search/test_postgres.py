"""``--storage postgresql://…`` against a real PostgreSQL server.

    AUTOTUNE_TEST_POSTGRES=postgresql://autotune:autotune@localhost:5432/autotune_test \\
        .venv/bin/python -m pytest -q tests/search/test_postgres.py

Without ``AUTOTUNE_TEST_POSTGRES`` the tests start a throwaway server of their own (``initdb`` and
``pg_ctl`` in a temporary folder, as the ``postgres`` user when run as root); they skip only when
neither a server nor the PostgreSQL binaries are there. ``.ci/run`` sets the variable. Each test
works in a database of its own, created and dropped around it (the role needs CREATEDB); the two
tests of ``shared_study`` read the one study its two workers ran.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy.engine import URL, make_url

from autotune.errors import ConfigError
from autotune.search.recovery import recover_lost
from autotune.search.storage import open_storage
from autotune.search.trials import reason_of, record_of
from tests.ports import free_port

psycopg = pytest.importorskip(
    "psycopg", reason="the postgres extra is not installed (pip install -e '.[postgres]')"
)

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
HANG = "tests.search.crashy.Workload-tiny-hang"


def _bindir() -> Path | None:
    found = shutil.which("initdb")
    candidates = [Path(found).resolve().parent] if found else []
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    return next(
        (d for d in candidates if (d / "initdb").exists() and (d / "pg_ctl").exists()), None
    )


@pytest.fixture(scope="session")
def pg_server():
    """The URL of a server where the role may create databases."""
    if os.environ.get("AUTOTUNE_TEST_POSTGRES"):
        yield os.environ["AUTOTUNE_TEST_POSTGRES"]
        return
    bindir = _bindir()
    if bindir is None:
        pytest.skip(
            "no PostgreSQL: set AUTOTUNE_TEST_POSTGRES or install postgresql (.ci/run does both)"
        )
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        shutil.chown(root, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = root / "data", free_port()
    run = dict(check=True, capture_output=True, cwd=root)
    subprocess.run(
        [*as_user, bindir / "initdb", "-D", data, "-U", "autotune", "--auth=trust", "--no-sync"],
        **run,
    )
    subprocess.run(
        [
            *as_user,
            bindir / "pg_ctl",
            "-D",
            data,
            "-l",
            root / "log",
            "-w",
            "-o",
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off",
            "start",
        ],
        **run,
    )
    try:
        yield f"postgresql://autotune@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, bindir / "pg_ctl", "-D", data, "-m", "immediate", "stop"],
            capture_output=True,
            cwd=root,
        )
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def fresh_database(server: str):
    """The URL of a new database on ``server``, dropped afterwards."""
    admin = make_url(server).set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"autotune_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        _drop(admin, name)


def _drop(admin: str, name: str, tries: int = 100) -> None:
    """Drop database ``name``, ending its connections. An autovacuum worker that the server started on
    it after a test's writes is one the test's role may not end (InsufficientPrivilege, "member of
    pg_signal_backend"): it finishes in a moment, and the drop is tried again."""
    with psycopg.connect(admin, autocommit=True) as conn:
        for attempt in range(tries):
            try:
                conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
                return
            except psycopg.errors.InsufficientPrivilege:
                if attempt == tries - 1:
                    raise
                time.sleep(0.1)


@pytest.fixture
def pg_url(pg_server):
    """A fresh database on the server, dropped after the test."""
    with fresh_database(pg_server) as url:
        yield url


def test_open_storage_rejects_bad_urls(tmp_path, monkeypatch):
    with pytest.raises(
        ConfigError, match=r"^--storage \(8 characters, no scheme://\) is not a database URL"
    ):
        open_storage("nonsense", tmp_path)
    with pytest.raises(ConfigError, match=r"^--storage \(15 characters, no scheme://\)") as bare:
        open_storage("host=h hunter2x", tmp_path)  # a libpq string: nothing in it is echoed
    assert "hunter2x" not in str(bare.value)
    with pytest.raises(
        ConfigError, match=r"^--storage foo://a/b: 'foo' is not a database SQLAlchemy knows"
    ):
        open_storage("foo://a/b", tmp_path)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the postgres extra were not installed
    with pytest.raises(
        ConfigError,
        match=r"driver 'psycopg' is not installed \(pip install 'autotune\[postgres\]'\)",
    ):
        open_storage("postgresql://u:secret@127.0.0.1:1/x", tmp_path)


@pytest.mark.parametrize(
    "url", ["postgresql://u:hunter2@127.0.0.1:notaport/x", "postgresql://u:hunter2@[::1:5432/x"]
)
def test_a_port_that_is_not_a_number_is_one_line(tmp_path, url, capsys):
    """SQLAlchemy reads such a port with int() (a ValueError, not its ArgumentError)."""
    from autotune.cli import main

    argv = [
        "run",
        "--storage",
        url,
        "--space",
        "quick",
        "--synthetic",
        "--out",
        str(tmp_path / "r"),
    ]
    assert main(argv) == 2
    printed = capsys.readouterr()
    assert printed.err.splitlines() == [
        f"autotune: error: --storage {url.replace('hunter2', '***')!r} is not a database URL "
        "(e.g. postgresql://<user>:<password>@<host>:5432/<db>)"
    ]
    assert "hunter2" not in printed.out + printed.err


@pytest.mark.parametrize(
    "url, why",
    [
        ("postgresql://u:hunter2@127.0.0.1:notaport/x", " is not a database URL"),
        ("postgresql://u:hunter2@127.0.0.1:1/x", ": cannot open the database: "),
    ],
)
def test_a_bad_url_in_the_environment_names_the_variable(tmp_path, monkeypatch, capsys, url, why):
    """The URL came from $AUTOTUNE_STORAGE and no --storage was given: the error named --storage,
    which sent the user looking for a flag they never passed."""
    from autotune.cli import main

    monkeypatch.setenv("AUTOTUNE_STORAGE", url)
    argv = ["run", "--space", "quick", "--synthetic", "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    printed = capsys.readouterr()
    lines = printed.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error: $AUTOTUNE_STORAGE "), lines
    assert why in lines[0] and "--storage" not in lines[0]
    assert "hunter2" not in printed.out + printed.err


def test_unreachable_server_is_one_line_without_the_password(tmp_path):
    with pytest.raises(ConfigError) as err:
        open_storage("postgresql://nobody:hunter2@127.0.0.1:1/x", tmp_path)
    msg = str(err.value)
    assert msg.startswith(
        "--storage postgresql://nobody:***@127.0.0.1:1/x: cannot open the database: "
    )
    assert "Connection refused" in msg and "hunter2" not in msg and "\n" not in msg


@pytest.mark.parametrize(
    "url, shown",
    [
        ("postgresql://nobody:hunter2@127.0.0.1:1/x", "postgresql://nobody:***@127.0.0.1:1/x"),
        (
            "postgresql://nobody@127.0.0.1:1/x?password=hunter2",
            "postgresql://nobody@127.0.0.1:1/x?password=***",
        ),
    ],
)
def test_bad_storage_exits_2_with_one_line(tmp_path, url, shown):
    cmd = [
        sys.executable,
        "-m",
        "autotune",
        "run",
        "--storage",
        url,
        "--space",
        "quick",
        "--synthetic",
        "--trials",
        "1",
        "--out",
        str(tmp_path / "run"),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"autotune: error: --storage {shown}: cannot open"
    ), done.stderr
    assert "hunter2" not in done.stderr + done.stdout


def test_workers_opening_a_fresh_database_together(pg_url, tmp_path):
    """Optuna's CREATE TABLEs race on PostgreSQL without the schema lock (duplicate key in pg_type)."""
    with ThreadPoolExecutor(4) as pool:
        storages = list(pool.map(lambda _: open_storage(pg_url, tmp_path), range(4)))
    assert all(s.get_all_studies() == [] for s in storages)


def test_workers_take_the_last_trial_of_a_study_one_at_a_time(pg_url, tmp_path):
    """Two workers each counted 3 of a study's 4 trials and each asked for the 4th ("trial 5/4"): the
    count and the ask are one worker's at a time (``claiming``), per study."""
    from autotune.search.storage import claiming

    studies = [
        optuna.create_study(
            study_name=name, storage=open_storage(pg_url, tmp_path), load_if_exists=True
        )
        for name in ("s", "s", "other")
    ]
    entered = threading.Event()

    def second() -> None:
        with claiming(studies[1]):
            entered.set()

    with claiming(studies[0]):
        with claiming(studies[2]):  # another study's claim is not held up
            pass
        waiting = threading.Thread(target=second)
        waiting.start()
        assert not entered.wait(1.0)  # the same study's waits
    assert entered.wait(30)
    waiting.join()


KILLED_WORKER = textwrap.dedent("""
    import sys, time, optuna
    from pathlib import Path
    from autotune.search.storage import heartbeat, open_storage
    storage = open_storage(sys.argv[1], Path("."), heartbeat_interval=1, grace_period=2)
    study = optuna.create_study(study_name="s", storage=storage)
    trial = study.ask()
    with heartbeat(study, trial):
        print(trial.number, flush=True)
        time.sleep(60)
""")


def test_trial_of_a_killed_worker_is_failed_by_the_next(pg_url, tmp_path):
    """Failed with its reason and queued again, by exactly one of the workers that look."""
    worker = subprocess.Popen(
        [sys.executable, "-c", KILLED_WORKER, pg_url],
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=tmp_path,
    )
    try:
        assert worker.stdout.readline().strip() == "0"
        time.sleep(1.5)  # the worker beats meanwhile: its trial is not stale
        study = optuna.load_study(
            study_name="s",
            storage=open_storage(pg_url, tmp_path, heartbeat_interval=1, grace_period=2),
        )
        assert recover_lost(study, own_folder=False, grace_period_s=2) == []
        assert study.trials[0].state == TrialState.RUNNING
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    time.sleep(3)  # past the grace period
    lines = recover_lost(study, own_folder=False, grace_period_s=2)
    assert lines and "trial #0 was lost" in lines[0] and "queued again as #1" in lines[0], lines
    assert recover_lost(study, own_folder=False, grace_period_s=2) == []  # once only
    lost, again = study.trials
    assert lost.state == TrialState.FAIL and reason_of(lost) == "interrupted"
    assert "stopped sending heartbeats for more than 2 s" in record_of(lost).failure.error
    assert again.state == TrialState.WAITING and again.user_attrs["queued_again_from"] == 0


@dataclass
class SharedStudy:
    """Two ``autotune run`` workers of one study; the second found its database in $AUTOTUNE_STORAGE."""

    url: URL
    query_url: str
    """The second worker's URL: its password in the query string."""
    password: str
    workers: list[subprocess.Popen]
    outputs: list[str]
    outs: list[Path]


@pytest.fixture(scope="module")
def shared_study(pg_server, tmp_path_factory) -> SharedStudy:
    """Worker 0 is given ``--storage URL``; worker 1 has no ``--storage``, its URL (not in ps) is in
    $AUTOTUNE_STORAGE with the password in the query string. 4 trials in all."""
    tmp = tmp_path_factory.mktemp("shared")
    with fresh_database(pg_server) as pg_url:
        url = make_url(pg_url)
        password = url.password or "not-needed"  # a server that trusts local users ignores it
        query_url = (
            url.set(password=None)
            .update_query_dict({"password": password})
            .render_as_string(hide_password=False)
        )
        run = [
            sys.executable,
            "-m",
            "autotune",
            "run",
            "--space",
            "quick",
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
            "--trials",
            "4",
            "--profile-steps",
            "0",
            "--no-guidance",
        ]  # the sharing, not the guidance, is under test here
        outs = [tmp / "worker0", tmp / "worker1"]
        ways = [(["--storage", pg_url], ENV), ([], {**ENV, "AUTOTUNE_STORAGE": query_url})]
        workers = [
            subprocess.Popen(
                [*run, *storage, "--out", str(out)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                cwd=ROOT,
            )
            for out, (storage, env) in zip(outs, ways)
        ]
        outputs = [
            w.communicate(timeout=600)[0] for w in workers
        ]  # a guard against a hang: ~110 s at a load of 5
        yield SharedStudy(url, query_url, password, workers, outputs, outs)


@pytest.mark.slow
def test_two_workers_share_one_study(shared_study, tmp_path):
    """Two ``autotune run`` processes, one study: 4 finished trials in all, one stock trial, both worked."""
    workers, outputs = shared_study.workers, shared_study.outputs
    assert [w.returncode for w in workers] == [0, 0], "\n\n".join(outputs)

    study = optuna.load_study(
        study_name="gr00t_n16-tiny-quick",
        storage=open_storage(shared_study.url.render_as_string(hide_password=False), tmp_path),
    )
    assert [t.state.is_finished() for t in study.trials] == [True] * 4, "\n\n".join(outputs)
    assert sum(bool(t.user_attrs.get("stock")) for t in study.trials) == 1
    pids = {str(w.pid) for w in workers}
    assert {t.user_attrs["worker"].rsplit(":", 1)[1] for t in study.trials} == pids
    for out in shared_study.outs:  # each worker wrote its own results from the shared study
        assert (out / "best.yaml").exists()


@pytest.mark.slow
def test_a_password_in_the_query_or_the_environment_is_shown_nowhere(shared_study, tmp_path):
    """Row 9 of issue 18: the URL comes from $AUTOTUNE_STORAGE (not in ps), its password in the query
    string; run.json, report.html and every line printed show it hidden."""
    worker, printed, out = shared_study.workers[1], shared_study.outputs[1], shared_study.outs[1]
    assert worker.returncode == 0, printed
    env = {**ENV, "AUTOTUNE_STORAGE": shared_study.query_url}
    report = subprocess.run(
        [sys.executable, "-m", "autotune", "report", str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["storage"].endswith(f"{shared_study.url.database}?password=***")
    password = shared_study.password
    for text in (
        printed,  # the worker's stdout and stderr
        report.stdout,
        report.stderr,
        (out / "run.json").read_text(),
        (out / "report.html").read_text(),
    ):
        assert f"password={password}" not in text
    assert "?password=***" in (out / "report.html").read_text()
    assert not (out / "study.journal").exists()  # the study is in the database
    names = optuna.get_all_study_names(open_storage(shared_study.query_url, tmp_path))
    assert names == ["gr00t_n16-tiny-quick"]


def _lines(proc: subprocess.Popen) -> queue.Queue:
    """The process's output lines, read as they come (None at the end)."""
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _until(lines: queue.Queue, text: str, seen: list[str], seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        assert line is not None, "".join(seen)
        seen.append(line)
        if text in line:
            return
    raise AssertionError(f"no {text!r} in:\n{''.join(seen)}")


@pytest.mark.slow
def test_a_killed_workers_trial_is_failed_and_measured_by_the_other(pg_url, tmp_path):
    """Row 4 of issue 18: worker A is killed with SIGKILL mid-trial. Worker B, which the running trial
    left with nothing to start, waits past the grace period instead of counting it, fails it (with
    its reason), and measures it again; the study ends with its stock trial measured."""
    space = tmp_path / "hang.yaml"
    space.write_text("knobs:\n  batch_size: {type: categorical, choices: [2, 5], group: data}\n")
    run = [
        sys.executable,
        "-m",
        "autotune",
        "run",
        "--storage",
        pg_url,
        "--workload",
        "tests.search.crashy:Workload",
        "--preset",
        "tiny",
        "--space",
        str(space),
        "--trials",
        "1",
        "--synthetic",
        "--batch-size",
        "5",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--profile-steps",
        "0",
        "--grace-period",
        "10",
    ]
    a = subprocess.Popen(
        [*run, "--out", str(tmp_path / "a")],
        env=ENV,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # batch size 5 hangs for an hour in A
    b = None
    try:
        storage = open_storage(pg_url, tmp_path)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (
            optuna.get_all_study_names(storage)
            and optuna.load_study(study_name=HANG, storage=storage).get_trials(
                states=(TrialState.RUNNING,)
            )
        ):
            time.sleep(0.5)
        b = subprocess.Popen(
            [*run, "--out", str(tmp_path / "b")],
            env={**ENV, "CRASHY_HANG_S": "0"},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines, seen = _lines(b), []
        _until(lines, "waiting for those of other workers still running", seen)
        (running,) = optuna.load_study(study_name=HANG, storage=storage).get_trials(
            states=(TrialState.RUNNING,)
        )
        a.kill()
        a.wait()
        _until(lines, "trial 1/1", seen)
        assert b.wait(timeout=120) == 0, "".join(seen)
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    output = "".join(seen)
    assert (
        f"trial #0 was lost: its worker {socket.gethostname()}:{a.pid} stopped sending heartbeats for more than 10 s"
        in output
    )
    lost, again = optuna.load_study(study_name=HANG, storage=storage).trials
    assert lost.state == TrialState.FAIL and reason_of(lost) == "interrupted"
    # what A had written of its trial before the kill stands: number, parameters, start, attributes
    assert (lost.number, lost.params, lost.datetime_start) == (
        running.number,
        running.params,
        running.datetime_start,
    )
    assert lost.user_attrs.items() >= running.user_attrs.items()
    assert again.state == TrialState.COMPLETE and again.params == {"batch_size": 5}
    assert again.user_attrs["stock"] and again.user_attrs["queued_again_from"] == 0
    assert again.user_attrs["worker"] == f"{socket.gethostname()}:{b.pid}"


def test_a_worker_with_other_settings_is_refused_while_the_first_measures_stock(pg_url, tmp_path):
    """Worker A created the study and runs its stock trial (nothing measured yet); worker B starts
    with another --batch-size: refused naming A's trial, not let in to replace the settings, which
    would have the study pair A's stock speed at batch 2 with B's trials at 4."""
    from autotune.search.storage import heartbeat
    from autotune.search.study import open_study
    from autotune.search.trials import WORKER
    from tests.search.test_faults import RUN
    from tests.studies import study_options

    def opts(batch: str, out: str):
        argv = [*RUN, "--batch-size", batch, "--storage", pg_url, "--out", str(tmp_path / out)]
        return study_options(argv)

    first = open_study(opts("2", "a"))
    stock = first.ask()
    stock.set_user_attr(WORKER, "host-a:123")
    with heartbeat(first, stock):
        with pytest.raises(ConfigError) as refused:
            open_study(opts("4", "b"))
        assert str(refused.value).startswith(
            f"{tmp_path / 'b'}: study 'gr00t_n16-tiny-quick' is being measured (trial #0 on host-a:123) "
            "with --batch-size 2, this command gives 4; continue it with the same setting"
        )
        assert len(open_study(opts("2", "c")).trials) == 1  # the same settings join
