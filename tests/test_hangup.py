"""Which handlers take SIGHUP: those that take SIGTERM, but where ``nohup`` ignores it (the user
asked that a hang-up not stop the command); the line of a stopped command; the writes a hang-up
leaves harmless. The commands' hang-ups themselves are tested on real terminals:
``tests/search/test_hangup.py`` and ``tests/train/test_job_hangup.py``."""

from __future__ import annotations

import os
import signal
import sys
import time
from types import SimpleNamespace

import pytest

from autotune import sigterm
from autotune.train.job import launch
from autotune.train.job.control import Control
from tests.clirun import ROOT
from tests.terminal import start_attached


def by_the_command_line() -> list[tuple[int, object]]:
    previous = sigterm.exit_on_sigterm()
    try:
        return [(s, signal.getsignal(s)) for s in (signal.SIGTERM, signal.SIGHUP)]
    finally:
        sigterm.restore(previous)


def by_the_job() -> list[tuple[int, object]]:
    control = Control(world_size=1)
    control.catch_signals()
    try:
        return [(s, signal.getsignal(s)) for s in (signal.SIGTERM, signal.SIGHUP)]
    finally:
        control.release()


def by_the_launcher() -> list[tuple[int, object]]:
    previous = launch._forward_stops(SimpleNamespace(pid=0))  # torchrun's: not signalled here
    try:
        return [(s, signal.getsignal(s)) for s in (signal.SIGTERM, signal.SIGHUP)]
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


INSTALLERS = [by_the_command_line, by_the_job, by_the_launcher]


@pytest.fixture
def sighup():
    """SIGHUP's handler put back after the test, whatever the test set."""
    previous = signal.getsignal(signal.SIGHUP)
    yield
    signal.signal(signal.SIGHUP, previous)


@pytest.mark.parametrize("installed", INSTALLERS)
def test_a_hang_up_takes_the_handler_of_sigterm(installed, sighup):
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    (_, on_term), (_, on_hup) = installed()
    assert on_hup == on_term and callable(on_hup)
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL  # put back


@pytest.mark.parametrize("installed", INSTALLERS)
def test_a_hang_up_ignored_by_nohup_stays_ignored(installed, sighup):
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    (_, on_term), (_, on_hup) = installed()
    assert callable(on_term) and on_hup == signal.SIG_IGN


@pytest.fixture
def stop_handlers():
    """SIGTERM's and SIGHUP's handlers in this process put back after a command that was stopped
    (it leaves handlers that do nothing: ``autotune.sigterm.restore``)."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_the_line_of_a_stopped_command_names_its_signal(signum, monkeypatch, capsys, stop_handlers):
    """A hang-up with the terminal still there (``kill -HUP``): the line says what stopped it."""
    from autotune.cli import main
    from autotune.profiling import cli as classify_cli

    def stopped(args):
        os.kill(os.getpid(), signum)
        time.sleep(10)  # the handler raises in here
        return 0

    monkeypatch.setattr(classify_cli, "run_classify", stopped)
    assert main(["classify", "trace.json"]) == 128 + signum
    assert capsys.readouterr().err == f"autotune: stopped by {signum.name}\n"


HELD = """
import os, signal, sys
from autotune.hangup import output_may_be_gone
held = sys.stderr  # as a progress bar or a logging handler holds it, from before the stop
signal.signal(signal.SIGHUP, lambda signum, frame: output_may_be_gone())
print("ready", flush=True)
signal.pause()
held.write("the clean-up's line\\n")
held.flush()
os.write(1, b"a line from C code\\n")
"""


def test_after_a_hang_up_the_terminal_takes_every_writer_s_lines(tmp_path):
    """Not only those printed through ``sys.stdout`` and ``sys.stderr`` as they are now."""
    script = tmp_path / "held.py"
    script.write_text(HELD)
    proc, terminal = start_attached(
        [sys.executable, str(script)], env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    try:
        deadline = time.monotonic() + 60
        while "ready" not in terminal.text and time.monotonic() < deadline:
            time.sleep(0.05)
        terminal.hang_up(proc)
        assert proc.wait(timeout=60) == 0, terminal.text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
