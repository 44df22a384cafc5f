"""A warm parent for trials: ``python -m autotune.train.trial.zygote LIFELINE_FD SOCKET``.

A fresh ``python -m autotune.train.trial.worker`` spends seconds importing torch and Dynamo before the
run's first line. This process imports them once, never runs a tensor
operation or touches CUDA, and forks each trial from that state: per request on its Unix socket
it forks the trial's guard, which opens a session of its own, takes the trial's environment,
working folder and log, and forks the worker (:mod:`autotune.train.trial.guard` does the rest, as for
an executed guard). The guard's exit status goes back on the request's connection.

Requests (one JSON line, the log's and the guard pipe's descriptors passed with it)::

    {"folder": ..., "env": {...}, "cwd": ..., "args": [worker arguments]}

Answers: ``{"pid": guard}`` at once (with a pidfd of the guard), ``{"exit": code}`` when the
guard ended (Popen's code: negative for a signal). The process ends when ``LIFELINE_FD`` reads end-of-file (its tuner is gone,
however it died); the trials it started keep their own guards.

A forked worker's ``/proc/PID/environ`` is this process's environment, not the trial's: the
trial's processes are found by their session instead (``procgroup``), and every process forked
from here carries ``procgroup.FAMILY`` in that view.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import sys
import tempfile

from autotune.train.trial.guard import guard
from autotune.train.trial.procgroup import SESSION_FILE

MAX_REQUEST = 1 << 20


def preload() -> None:
    """What every worker imports first. Nothing here may initialise CUDA (:func:`cuda_loaded` checks);
    the threads the imports start (OpenBLAS's pool) OpenBLAS stops before a fork and starts again when used."""
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401  (AdamW's constructor and the meta ops import it)

    import autotune.train.trial.worker  # noqa: F401


def cuda_loaded() -> bool:
    """Whether this process mapped the CUDA driver: a child forked after CUDA's initialisation
    cannot use CUDA, so such a zygote forks nothing."""
    try:
        with open("/proc/self/maps") as f:
            return any("libcuda.so" in line for line in f)
    except OSError:
        return True


def main(argv: list[str]) -> int:
    from autotune import quiet

    quiet.install()  # before the imports: its forked trials inherit the filters
    lifeline, path = int(argv[0]), argv[1]
    preload()
    if cuda_loaded():
        sys.stdout.write("refused: the CUDA driver was loaded by the imports\n")
        return 1
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(
        signal.SIGCHLD, lambda *_: None
    )  # a handler, so that SIGCHLD writes to the wake-up pipe
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    _serve(listener, lifeline, wake_r, path)
    return 0


def _leave(path: str) -> None:
    """End this process: its socket and the folder the tuner made for it go first (the tuner may be
    gone, killed, and can no longer remove them); each trial's guard sees the tuner go and cleans up."""
    with contextlib.suppress(OSError):
        os.unlink(path)
        os.rmdir(os.path.dirname(path))
    os._exit(0)


def _serve(listener: socket.socket, lifeline: int, wake: int, path: str) -> None:
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(lifeline, selectors.EVENT_READ, "lifeline")
    sel.register(wake, selectors.EVENT_READ, "child")
    waiting: dict[int, socket.socket] = {}  # guard pid -> the connection that asked for it
    while True:
        for key, _ in sel.select():
            if key.data == "lifeline" and not os.read(lifeline, 1):
                _leave(path)  # the tuner is gone, or done with this zygote
            elif key.data == "accept":
                conn, _ = listener.accept()
                pid = _start(
                    conn,
                    [listener.fileno(), lifeline, wake, *(c.fileno() for c in waiting.values())],
                )
                if pid is None:
                    conn.close()
                else:
                    waiting[pid] = conn
            elif key.data == "child":
                os.read(wake, 4096)
                _reap(waiting)


def _reap(waiting: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            _answer(
                conn, {"exit": os.waitstatus_to_exitcode(status)}
            )  # unless the tuner stopped waiting
            conn.close()


def _start(conn: socket.socket, inherited: list[int]) -> int | None:
    """Fork the guard ``conn`` asks for; ``inherited``: this process's descriptors, closed in the child
    (another trial's connection held open there would hide this process's end from that trial)."""
    try:
        request, fds = _receive(conn)
    except (OSError, ValueError) as exc:
        _answer(conn, {"error": f"bad request: {exc}"})
        return None
    pid = os.fork()
    if pid == 0:
        for fd in (*inherited, conn.fileno()):
            os.close(fd)
        _become_guard(request, *fds)  # never returns
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)  # the tuner signals the guard through it, safe from pid reuse
    try:
        socket.send_fds(conn, [json.dumps({"pid": pid}).encode() + b"\n"], [pidfd])
    except OSError:
        pass  # the tuner stopped waiting; the guard's exit is reaped all the same
    finally:
        os.close(pidfd)
    return pid


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 2)
    if len(fds) != 2:
        for fd in fds:
            os.close(fd)
        raise ValueError(f"expected the log's and the guard pipe's descriptors, got {len(fds)}")
    while not data.endswith(b"\n"):
        more = conn.recv(MAX_REQUEST)
        if not more:
            raise ValueError("the request ended early")
        data += more
    return json.loads(data), list(fds)


def _answer(conn: socket.socket, message: dict) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(message).encode() + b"\n")


def _become_guard(request: dict, log: int, guard_end: int) -> None:
    """In the forked child: the trial's session, environment, folder and output, then the guard."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # the imports may have asked for it: the trial's TMPDIR decides
        with open(os.path.join(request["folder"], SESSION_FILE), "w") as f:
            f.write(str(os.getpid()))
        code = guard(guard_end, request["folder"], lambda: _fork_worker(request["args"]))
    except BaseException:  # noqa: BLE001  the guard's own failure: say it in the trial's log
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _fork_worker(args: list[str]) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        from autotune.train.trial import worker

        sys.argv = [worker.__file__, *args]
        code = worker.main(args)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001  what an executed worker would print before exiting 1
        import traceback

        traceback.print_exc()
    finally:
        from autotune.train.trial.worker import exit_now

        exit_now(code)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
