"""The PostgreSQL server going away for a moment mid-study (a real server, stopped and started
again): the study's calls wait and go on; an outage longer than the bound is one line."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import optuna
import pytest

from autotune.errors import ConfigError
from autotune.search import retry
from autotune.search.storage import open_storage
from tests.ports import free_port
from tests.search.test_faults import gone, hang_argv, start_tuner, wait_for_trial
from tests.search.test_postgres import _bindir, psycopg
from tests.trialprocs import trial_processes

pytestmark = pytest.mark.slow


class Server:
    """A throwaway PostgreSQL server of this test's own, so that it may stop it."""

    def __init__(self, bindir: Path) -> None:
        self.bin, self.root = bindir, Path(tempfile.mkdtemp(prefix="autotune-pg-outage-"))
        self.as_user: list[str] = []
        if __import__("os").geteuid() == 0:  # initdb refuses to run as root
            shutil.chown(self.root, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.data, self.port = self.root / "data", free_port()
        self._run("initdb", "-D", self.data, "-U", "autotune", "--auth=trust", "--no-sync")
        self.start()
        self.url = f"postgresql://autotune@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args) -> None:
        subprocess.run(
            [*self.as_user, self.bin / tool, *args], check=True, capture_output=True, cwd=self.root
        )

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", self.data, "-l", self.root / "log", "-w", "-o", opts, "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")

    def remove(self) -> None:
        subprocess.run([*self.as_user, self.bin / "pg_ctl", "-D", self.data, "-m", "immediate", "stop"],
                       capture_output=True, cwd=self.root)  # fmt: skip
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def server():
    bindir = _bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL binaries (install postgresql; .ci/run does)")
    srv = Server(bindir)
    yield srv
    srv.remove()


def _trial(study: optuna.Study) -> None:
    trial = study.ask()
    trial.suggest_int("x", 0, 9)
    study.tell(trial, 1.0)


def test_a_study_goes_on_through_a_restart_of_the_server(server, tmp_path):
    study = optuna.create_study(storage=open_storage(server.url, tmp_path), study_name="s")
    _trial(study)
    server.stop()
    restart = threading.Timer(3.0, server.start)
    restart.start()
    start = time.monotonic()
    _trial(study)  # blocks through the outage, then goes on
    restart.join()
    assert time.monotonic() - start >= 2.5
    _trial(study)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 3


def test_an_outage_beyond_the_bound_is_one_line_naming_the_storage(server, tmp_path, monkeypatch):
    monkeypatch.setattr(retry, "OUTAGE_S", 3.0)
    study = optuna.create_study(storage=open_storage(server.url, tmp_path), study_name="s")
    _trial(study)
    server.stop()
    start = time.monotonic()
    with pytest.raises(ConfigError) as exc:
        _trial(study)
    assert 3.0 <= time.monotonic() - start < 20
    message = str(exc.value)
    assert message.startswith(f"--storage {server.url}: the database did not answer for 3 s (")
    assert message.endswith("the study is kept there: run the same command again to continue it")
    assert "\n" not in message
    server.start()
    again = optuna.load_study(storage=open_storage(server.url, tmp_path), study_name="s")
    assert len(again.trials) >= 1  # what the study held before the outage is there


def test_a_tuner_stopped_while_the_server_is_down_exits_at_once(server, tmp_path):
    """SIGTERM while the database is away: the tuner does not wait out the outage bound to record
    its trial as interrupted (the next worker fails it once its heartbeat is stale); it stops its
    trial and exits with one line, as it does with the database up."""
    argv = [*hang_argv(tmp_path, 5), "--storage", server.url, "--grace-period", "4"]
    tuner = start_tuner(tmp_path, argv)  # a heartbeat a second
    folder = wait_for_trial(tmp_path, 2)
    pids = trial_processes(folder)
    server.stop()
    time.sleep(2)  # heartbeats find no server
    start = time.monotonic()
    tuner.send_signal(signal.SIGTERM)
    output = tuner.communicate(timeout=300)[0]
    assert time.monotonic() - start < 30, output
    assert tuner.returncode == 128 + signal.SIGTERM, output
    assert "Traceback" not in output and output.splitlines()[-1] == "autotune: stopped by SIGTERM"
    assert gone(pids, 5) and not folder.exists()


def test_a_database_that_refuses_the_study_is_one_line_naming_the_storage(server, tmp_path):
    """The server answers but takes no write (a failover to a read-only standby; a role without
    rights): the study's call is one line naming the storage and the server's words, not Optuna's
    "invalid data" traceback, and a heartbeat it refuses is skipped, not a thread's traceback."""
    storage = open_storage(server.url, tmp_path)
    study = optuna.create_study(storage=storage, study_name="s")
    trial = study.ask()
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        conn.execute("SELECT pg_reload_conf()")
    storage.record_heartbeat(trial._trial_id)
    with pytest.raises(ConfigError) as refused:
        study.tell(trial, 1.0)
    assert str(refused.value).startswith(
        f"--storage {server.url}: the database refused the study's request (cannot execute "
    )
    assert str(refused.value).endswith(
        "in a read-only transaction); the study is kept there as it was before it: once the "
        "database takes its requests again, run the same command to continue it"
    )
