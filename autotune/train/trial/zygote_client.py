"""The tuner's side of :mod:`autotune.train.trial.zygote`: one warm zygote per environment, trials forked from it.

    guard = fork_trial(argv, folder=tmp, env=env, log=log, guard_end=fd)  # None: start it as a process
    guard.wait(timeout)                                                   # as subprocess.Popen's

Only a one-process worker (``python -m autotune.train.trial.worker ...``) is forked; torchrun and
anything else are executed as before. A zygote serves the trials whose environment and working
folder are the ones it started with (torch and Inductor read some variables when imported), bar
:data:`LATE_READ`; another environment starts another zygote. ``AUTOTUNE_WARM_START=0`` turns
forking off. Whatever goes wrong with a zygote, the trial is executed instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO

from autotune.train.trial.procgroup import FAMILY, MARKER

ENABLE_ENV = "AUTOTUNE_WARM_START"
WORKER = "autotune.train.trial.worker"
LATE_READ = frozenset(
    {
        MARKER,
        "CUDA_DEVICE_MAX_CONNECTIONS",  # the trial's marker (never the zygote's); CUDA's, at its context
        "TMPDIR",
        "AUTOTUNE_CACHE",  # read when used (the forked guard forgets tempfile's cached folder)
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",  # read when Inductor first writes its caches
        "PYTEST_CURRENT_TEST",  # pytest's, new for every test; no part of a trial reads it
    }
)
"""Variables a zygote need not share with its trials: read after the worker starts, or never."""
READY_S = 120.0
"""How long a new zygote may take to import torch before its trial is executed instead."""


class ForkedGuard:
    """A trial's guard forked by a zygote, with :class:`subprocess.Popen`'s ``pid``, ``args``,
    ``returncode``, ``wait`` and ``poll``; ``kill`` signals it through a pidfd (its pid is the
    zygote's child and may be reused once the zygote reaps it)."""

    forked = True
    parent_lost = False
    """True when the zygote died before answering the guard's exit status (its trial is lost)."""

    def __init__(self, conn: socket.socket, pid: int, pidfd: int, args: list[str], done) -> None:
        self.pid, self.args, self.returncode = pid, args, None
        self._conn, self._pidfd, self._buffer, self._done = conn, pidfd, b"", done

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._conn.settimeout(left)
            try:
                data = self._conn.recv(4096)
            except (TimeoutError, BlockingIOError):  # the latter for a timeout of 0
                raise subprocess.TimeoutExpired(self.args, timeout) from None
            if b"\n" in self._buffer + data or not data:
                self._finish(self._buffer + data)
            else:
                self._buffer += data
        return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def _finish(self, data: bytes) -> None:
        line = data.split(b"\n", 1)[0]
        if line:
            self.returncode = int(json.loads(line)["exit"])
        else:  # the zygote died: the guard's status went with it, and nothing can wait for the guard
            self.parent_lost = True
            self.kill()  # the trial's other processes go with its session (procgroup.stop_trial)
            self.returncode = 1
        self._conn.close()
        os.close(self._pidfd)
        self._done()


class Zygote:
    """One zygote process: started with an environment and a working folder, ended with :meth:`close`."""

    def __init__(self, env: dict[str, str], cwd: str) -> None:
        self._dir = tempfile.mkdtemp(
            prefix="autotune-zygote-"
        )  # 0700: only this user may ask for forks
        if len(self._dir) > 90:  # a Unix socket's path has room for 107 bytes
            os.rmdir(self._dir)
            self._dir = tempfile.mkdtemp(prefix="autotune-zygote-", dir="/tmp")
        self.path = os.path.join(self._dir, "socket")
        life_r, self._life_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "autotune.train.trial.zygote", str(life_r), self.path],
                env={**env, FAMILY: "1"},
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=(life_r,),
            )
        finally:
            os.close(life_r)
        self.running = 0
        self._ready: bool | None = None
        self._ready_lock = threading.Lock()

    def ready(self) -> bool:
        with self._ready_lock:
            return self._wait_ready()

    def _wait_ready(self) -> bool:
        if self._ready is None:
            sel = selectors.DefaultSelector()
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            line = self.proc.stdout.readline() if sel.select(READY_S) else b""
            sel.close()
            self._ready = line == b"ready\n"
            if (
                not self._ready
            ):  # it refused (CUDA), or cannot start here: each trial would pay for another
                _refused.append(line.decode(errors="replace").strip() or "the zygote did not start")
        return self._ready

    def fork(
        self,
        args: list[str],
        *,
        folder: str,
        env: dict[str, str],
        cwd: str,
        log: int,
        guard_end: int,
        done,
    ) -> ForkedGuard:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
            request = (
                json.dumps({"folder": folder, "env": env, "cwd": cwd, "args": args}).encode()
                + b"\n"
            )
            socket.send_fds(conn, [request], [log, guard_end])
            conn.settimeout(30)
            data, fds, _, _ = socket.recv_fds(conn, 4096, 1)
            answer = json.loads(data.split(b"\n", 1)[0])
            if "pid" not in answer or len(fds) != 1:
                raise OSError(answer.get("error", "no pid in the zygote's answer"))
        except BaseException:
            conn.close()
            raise
        with _lock:
            self.running += 1
        return ForkedGuard(conn, int(answer["pid"]), fds[0], [WORKER, *args], done)

    def close(self) -> None:
        os.close(
            self._life_w
        )  # the zygote ends at end-of-file; the trials it forked keep their guards
        self.proc.stdout.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)  # a zygote that ended removed it itself


_lock = threading.Lock()
_zygotes: dict[tuple, Zygote] = {}
_refused: list[
    str
] = []  # why a zygote did not start (its imports loaded CUDA, ...): no more are tried


def enabled() -> bool:
    return (
        os.environ.get(ENABLE_ENV, "1") != "0"
        and hasattr(os, "pidfd_open")
        and sys.platform == "linux"
        and not _refused
    )


def fork_trial(
    argv: list[str], *, folder: str, env: dict[str, str], log: IO | int, guard_end: int
) -> ForkedGuard | None:
    """``argv`` forked from a warm zygote under a guard, or None where it is to be executed."""
    if not enabled() or argv[:3] != [sys.executable, "-m", WORKER]:
        return None
    cwd = os.getcwd()
    zygote = _zygote_for(env, cwd)
    if zygote is None:
        return None
    log_fd = log.fileno() if hasattr(log, "fileno") else None
    devnull = os.open(os.devnull, os.O_WRONLY) if log_fd is None else None
    try:
        return zygote.fork(
            argv[3:],
            folder=folder,
            env=env,
            cwd=cwd,
            log=devnull if log_fd is None else log_fd,
            guard_end=guard_end,
            done=lambda: _finished(zygote),
        )
    except (OSError, ValueError):
        _retire(zygote)
        return None
    finally:
        if devnull is not None:
            os.close(devnull)


def _key(env: dict[str, str], cwd: str) -> tuple:
    return cwd, sys.executable, frozenset((k, v) for k, v in env.items() if k not in LATE_READ)


def _zygote_for(env: dict[str, str], cwd: str) -> Zygote | None:
    key = _key(env, cwd)
    with _lock:
        zygote = _zygotes.get(key)
        if zygote is None:
            for other_key, other in list(_zygotes.items()):  # one idle zygote at most stays warm
                if other.running == 0:
                    del _zygotes[other_key]
                    other.close()
            zygote = _zygotes[key] = Zygote(
                {k: v for k, v in env.items() if k not in LATE_READ}, cwd
            )
    if zygote.ready() and zygote.proc.poll() is None:
        return zygote
    _retire(zygote)
    return None


def _finished(zygote: Zygote) -> None:
    with _lock:
        zygote.running -= 1


def _retire(zygote: Zygote) -> None:
    with _lock:
        for key, z in list(_zygotes.items()):
            if z is zygote:
                del _zygotes[key]
    if zygote.running == 0:
        zygote.close()
