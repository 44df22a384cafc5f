"""The command line: the listing of --help matches the commands' modules, and the commands that
need no torch start without importing it (row 14 of issue 18: ~2 s and ~290 MB before)."""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from autotune.cli import COMMANDS
from tests import sigterm_moments
from tests.clirun import ROOT, autotune, one_line_error
from tests.trialprocs import children_with_commands

TRACE = ROOT / "tests" / "profiling" / "data" / "cpu_only.json.gz"


def test_the_listing_is_what_the_modules_register():
    registered: dict[str, str] = {}
    for module in dict.fromkeys(m for m, _ in COMMANDS.values()):
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(sub)
        registered |= {a.dest: a.help for a in sub._choices_actions}
    assert registered == {name: line for name, (_, line) in COMMANDS.items()}


def _imported(*argv: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``python -X importtime -m autotune ARGV``; the modules it imported, from its stderr."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "autotune", *argv], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)  # fmt: skip
    modules = set(
        re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)$", proc.stderr, re.MULTILINE)
    )
    return proc, modules


def _torch_modules(modules: set[str]) -> set[str]:
    return {m for m in modules if m == "torch" or m.startswith("torch.")}


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        [],
        ["classify", "--help"],
        ["classify", str(TRACE)],
        ["classify", str(TRACE), "--json"],
    ],
    ids=lambda a: " ".join(a)[:20] or "bare",
)
def test_help_and_classify_do_not_import_torch(argv):
    proc, modules = _imported(*argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "autotune.cli" in modules and not _torch_modules(modules)


def test_report_does_not_import_torch(tmp_path):
    """A run folder with one finished trial (made with optuna here; no training needed)."""
    run = tmp_path / "run"
    run.mkdir()
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(run / "study.journal"))
    )
    study = optuna.create_study(study_name="w-tiny-quick", storage=storage, direction="maximize")
    study.add_trial(create_trial(params={"optimizer.impl": "foreach"}, value=12.5,
                                 distributions={"optimizer.impl": CategoricalDistribution(["foreach", "fused"])},
                                 user_attrs={"stock": True, "buckets": json.dumps({"compute_serial": 1.0})}))  # fmt: skip
    proc, modules = _imported("report", str(run), "--out", str(tmp_path / "r.html"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "r.html").is_file()
    assert "autotune.report.model" in modules and not _torch_modules(modules)


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--config", "{bad}"],
        ["verify", "--config", "{bad}"],
        ["train", "--config", "{unknown}"],
        ["run", "--space", "{bad}"],
        ["run", "--time-budget", "soon"],
        ["run", "--bogus"],
    ],
    ids=lambda a: " ".join(a)[:24],
)
def test_wrong_input_to_a_training_command_is_refused_before_torch(tmp_path, argv):
    """A wrong file or flag gets its one line in a fraction of a second, not after torch's import."""
    (tmp_path / "bad.yaml").write_text("preset: [tiny\n")
    (tmp_path / "unknown.yaml").write_text("preset: tiny\nbogus_key: 1\n")
    files = {"bad": tmp_path / "bad.yaml", "unknown": tmp_path / "unknown.yaml"}
    proc, modules = _imported(*(a.format(**files) for a in argv))
    assert proc.returncode == 2 and "autotune: error: " in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not _torch_modules(modules)


def test_a_command_that_trains_still_imports_torch():
    """The check above can fail: ``inspect`` needs the model, and so torch."""
    proc, modules = _imported("inspect", "--list")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "torch" in _torch_modules(modules)


def test_the_console_script_is_the_same_entry_point():
    script = Path(sys.executable).with_name("autotune")
    if not script.exists():
        pytest.skip("the autotune console script is not installed (pip install -e .)")
    proc = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "classify" in proc.stdout and "sync" in proc.stdout
    assert "autotune.cli:main" in (ROOT / "pyproject.toml").read_text()


def test_a_run_out_of_device_memory_is_one_line(monkeypatch, capsys):
    """What torch raises when a step passes the device or the --memory-budget cap: one line, no
    traceback, the allocator's figures and what to do."""
    import torch

    from autotune.cli import main
    from autotune.train.window import runner

    def full(cfg, **kwargs):
        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 36.00 MiB. GPU 0 has a total capacity of 139.80 GiB"
            " of which 115.58 GiB is free. 23.49 GiB allowed; If reserved but unallocated memory is"
            " large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        )

    monkeypatch.setattr(runner, "run_training", full)  # the device filling up, as torch says it
    code = main(["train", "--preset", "tiny", "--steps", "1"])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "out of memory: CUDA out of memory. Tried to allocate 36.00 MiB" in err
    assert "23.49 GiB allowed" in err and "memory.accumulation_steps" in err


CPU_FULL = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
    "tried to allocate 261120000 bytes. Error code 12 (Cannot allocate memory)"
)


def test_a_run_out_of_host_memory_is_one_line_and_an_oom(monkeypatch, capsys):
    """What torch's CPU allocator raises (a RuntimeError) is out of memory too: one line, not a
    traceback, and a trial that raises it failed for memory ("oom"), not for an unknown error."""
    from autotune.cli import main
    from autotune.train.trial.worker import classify_exception
    from autotune.train.window import runner

    def full(cfg, **kwargs):
        raise RuntimeError(CPU_FULL)

    monkeypatch.setattr(runner, "run_training", full)
    code = main(["train", "--preset", "tiny", "--steps", "1"])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "out of memory: [enforce fail at alloc_cpu.cpp:127]" in err and "261120000 bytes" in err
    assert classify_exception(RuntimeError(CPU_FULL))[0] == "oom"


def test_a_command_that_trains_nothing_is_not_given_training_advice_for_its_memory(
    monkeypatch, capsys
):
    """`classify` or `data make` out of memory was told to lower memory.accumulation_steps."""
    from autotune.cli import main
    from autotune.profiling import cli as classify_cli

    def full(args):
        raise MemoryError()

    monkeypatch.setattr(classify_cli, "run_classify", full)
    assert main(["classify", "trace.json"]) == 1
    assert capsys.readouterr().err == (
        "autotune: error: out of memory; this machine's memory ran out (rerun with --debug for the "
        "traceback)\n"
    )


def test_a_measuring_run_stopped_by_sigterm_to_its_group_is_one_line(tmp_path):
    """A scheduler's (or `timeout`'s) SIGTERM reaches the loader's workers too: the loader's SIGCHLD
    handler raised "DataLoader worker is killed by signal: Terminated" over the command's own line,
    a traceback from wherever the main process was."""
    import os
    import signal
    import time

    import psutil

    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUTOTUNE_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "train", "--preset", "tiny", "--steps", "100000",
         "--warmup", "1"],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    me = psutil.Process(proc.pid)

    mine = " ".join(me.cmdline())

    def workers() -> int:  # forked, they show its command line (the dataset's maker is spawned)
        return sum(command == mine for _, command in children_with_commands(proc.pid))

    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and workers() < 2:
            time.sleep(0.2)
        assert workers() >= 2, "no loader workers"
        time.sleep(2)  # training
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # a failed look must not leave 100,000 steps training
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 143 and err.splitlines() == ["autotune: stopped by SIGTERM"], err


@pytest.mark.parametrize("moment", list(sigterm_moments.MOMENTS))
def test_sigterm_to_the_group_at_an_unsafe_moment_is_one_line(moment):
    """SIGTERM lands by chance where its exception does not end the command cleanly
    (``tests/sigterm_moments.py`` sends it there exactly): inside a loader's start (its half-made
    iterator's ``__del__`` printed an AttributeError under the line), in a pipe's ``__del__`` as a
    batch arrives (Python printed "Exception ignored" and dropped the stop: the run went on to fail
    on its dead workers, "autotune: error: Connection reset by peer"), in numpy's import from torch's
    C code (which dropped the stop: the run went on as if never stopped), or the workers' SIGCHLD
    comes as the SIGTERM handler begins (the loader's handler ran first: a traceback of "DataLoader
    worker (pid N) is killed by signal: Terminated", exit 1; seen in the test above, 1 run in 40 on
    a busy host)."""
    import os

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "tests.sigterm_moments", moment], cwd=ROOT, env=env,
                          capture_output=True, text=True, start_new_session=True, timeout=120)  # fmt: skip
    outcome = (proc.returncode, proc.stderr.splitlines())
    assert outcome == (143, ["autotune: stopped by SIGTERM"]), proc.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["data", "check", "nowhere"],  # the command's modules import torch
        ["train", "--preset", "tiny", "--synthetic", "--steps", "1"],  # the command imports it
    ],
)
def test_torch_failing_to_import_from_a_bad_variable_is_one_line(tmp_path, monkeypatch, argv):
    monkeypatch.setenv("TORCH_LOGS", "nonsense")
    line = one_line_error(autotune(*argv, cwd=tmp_path))
    assert "torch failed to import (ValueError: Invalid log settings: nonsense" in line
    assert "TORCH_LOGS" in line
    debug = autotune("--debug", *argv, cwd=tmp_path)
    assert debug.returncode != 0 and "Traceback" in debug.stderr
