"""A trial's processes: started together, stopped together, never outliving the tuner.

    proc = start_trial(argv, folder=tmp, env=env, log=log)  # the guard, and argv under it
    ...
    stop_trial(proc)                                         # every process of the trial, killed

Every process of a trial carries ``AUTOTUNE_TRIAL=<its temporary folder's name>`` in its
environment (loader workers and ranks inherit it, whether forked or spawned) and starts in the
session that the guard (:mod:`autotune.train.trial.guard`) leads. A trial forked from a zygote
(:mod:`autotune.train.trial.zygote`) shows the zygote's environment in ``/proc`` instead: its processes
are those of the zygote's family in the session its folder names. :func:`stop_trial` kills the
session's process group and every process of the trial; the guard does the same, and removes
the folder, when the tuner dies. A tuner killed together with its guard (``kill -9`` of both, a
frozen machine) leaves the folder with its ``owner.json``: :func:`reap_orphans` kills what is left
of such trials and removes their folders, and ``launch`` calls it before every run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

MARKER = "AUTOTUNE_TRIAL"
"""Environment variable naming the trial (its temporary folder's name) in each of its processes."""
PREFIX = "autotune-run-"
"""Of a trial's temporary folder."""
OWNER_FILE = "owner.json"
"""In the temporary folder: the tuner that started the trial (host, pid, process start time)."""
PID_FILE = "worker.pid"
"""In the temporary folder: the pid of the guard's child (the worker, or torchrun)."""
FAMILY = "AUTOTUNE_ZYGOTE"
"""In a zygote's environment: what the trials it forks show in ``/proc/PID/environ``."""
SESSION_FILE = "session"
"""In a forked trial's temporary folder: its session id (its guard's pid)."""


@dataclass
class TrialProcess:
    """A running trial: the guard's ``Popen`` and the pipe end whose closing tells the guard to stop it."""

    popen: subprocess.Popen  # or a zygote's ForkedGuard, which answers like one
    folder: str
    tuner_end: int

    def worker_pid(self) -> int | None:
        try:
            return int(Path(self.folder, PID_FILE).read_text())
        except (OSError, ValueError):
            return None


def start_trial(
    argv: list[str],
    *,
    folder: str,
    env: dict[str, str],
    log: IO | int,
    fork: Callable[..., subprocess.Popen | None] | None = None,
) -> TrialProcess:
    """Start ``argv`` under a guard, in a session of its own, with its output to ``log``: forked by
    ``fork`` (``zygote_client.fork_trial``) where it returns a guard, else executed."""
    _write_owner(folder)
    guard_end, tuner_end = os.pipe()  # neither end is inherited by other children (O_CLOEXEC)
    env = {**env, MARKER: Path(folder).name}
    try:
        popen = fork(argv, folder=folder, env=env, log=log, guard_end=guard_end) if fork else None
        if popen is None:
            popen = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "autotune.train.trial.guard",
                    str(guard_end),
                    folder,
                    "--",
                    *argv,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                pass_fds=(guard_end,),
            )
    except BaseException:
        os.close(tuner_end)
        raise
    finally:
        os.close(guard_end)
    return TrialProcess(popen, folder, tuner_end)


def stop_trial(proc: TrialProcess) -> None:
    """Kill every process of the trial (also after it exited: its loader workers may not have)."""
    if getattr(proc.popen, "forked", False):
        proc.popen.kill()  # through its pidfd; its session's other processes are found by kill_trial
    else:
        # The group id is the guard's pid, which stays ours until the wait below reaps it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.popen.pid, signal.SIGKILL)
    kill_trial(proc.folder)
    proc.popen.wait()
    with contextlib.suppress(OSError):
        os.close(proc.tuner_end)


def kill_trial(folder: str, *, spare: int | None = None) -> list[int]:
    """SIGKILL every process of the trial in ``folder`` (but ``spare``); their pids."""
    procs = [p for p in _processes_of(Path(folder)) if p.pid != spare]
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(procs, timeout=5)
    return [p.pid for p in procs]


def _processes_of(folder: Path) -> list[psutil.Process]:
    """The trial's processes: those whose environment carries its marker (executed ones), and those a
    zygote forked (the zygote's mark in their environment, ``/proc`` showing the zygote's) that are in
    the trial's session."""
    session = _session_of(folder)
    me, found = os.getpid(), []
    for p in psutil.process_iter(["environ"], ad_value=None):
        env = p.info["environ"]
        if p.pid == me or not env:
            continue
        if env.get(MARKER) == folder.name or (
            session is not None and FAMILY in env and _sid(p.pid) == session
        ):
            found.append(p)
    return found


def _session_of(folder: Path) -> int | None:
    try:
        return int((folder / SESSION_FILE).read_text())
    except (OSError, ValueError):
        return None


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _write_owner(folder: str) -> None:
    me = psutil.Process()
    owner = {"host": socket.gethostname(), "pid": me.pid, "create_time": me.create_time()}
    Path(folder, OWNER_FILE).write_text(json.dumps(owner))


def reap_orphans(root: str | os.PathLike | None = None) -> list[str]:
    """Kill the processes and remove the folders of trials whose tuner died on this host; one line each.

    A folder whose owner is alive (or on another host, or another user's, or without
    ``owner.json``) is left alone.
    """
    root = Path(root or tempfile.gettempdir())
    orphans = [
        (folder, owner)
        for folder in root.glob(f"{PREFIX}*")
        if (owner := _dead_owner(folder)) is not None
    ]
    if not orphans:
        return []
    notes = []
    for folder, owner in orphans:
        procs = _processes_of(folder)
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(procs, timeout=5)
        shutil.rmtree(folder, ignore_errors=True)
        killed = f"killed its processes {sorted(p.pid for p in procs)} and " if procs else ""
        notes.append(
            f"{killed}removed {folder}: a trial of autotune (pid {owner['pid']}), which was killed"
        )
    return notes


def _dead_owner(folder: Path) -> dict | None:
    """The owner of ``folder`` when it is a process of this host and user that no longer runs."""
    try:
        owner = json.loads((folder / OWNER_FILE).read_text())
        if folder.stat().st_uid != os.getuid() or owner["host"] != socket.gethostname():
            return None
        pid, started = int(owner["pid"]), float(owner["create_time"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        alive = (
            abs(psutil.Process(pid).create_time() - started) < 1.0
        )  # not a new process with a reused pid
    except psutil.Error:
        alive = False
    return None if alive else owner
