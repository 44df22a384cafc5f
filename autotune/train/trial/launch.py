"""Run a configuration in fresh processes (torchrun for several) and collect its record.

Every run gets its own processes and its own temporary folder: a crash, a hang (killed at the
timeout, with every process of the run) or an out-of-memory error is returned as a
:class:`~autotune.train.trial.record.TrialRecord` with its failure and reason, and nothing is left behind.
The processes run under a guard (:mod:`autotune.train.trial.procgroup`) and die with the caller, however
it dies; a run's exit without a result is explained by :mod:`autotune.train.trial.exitcause`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from autotune.config import TrainConfig, save_config
from autotune.config.compat import usable_cpus
from autotune.ranks import PLACE
from autotune.train.trial import zygote_client
from autotune.train.trial.exitcause import exit_failure, oom_kills
from autotune.train.trial.hostload import read_host_load
from autotune.train.trial.logpump import open_log
from autotune.train.trial.procgroup import (
    PREFIX,
    TrialProcess,
    reap_orphans,
    start_trial,
    stop_trial,
)
from autotune.train.trial.record import INTERRUPTED, TrialRecord
from autotune.train.window import cost

MULTI_GPU_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def command(
    config_path: str,
    out: str,
    steps: int,
    warmup: int,
    nproc: int,
    profile_out: str | None = None,
    extra: list[str] | None = None,
) -> list[str]:
    worker = [
        "--config",
        config_path,
        "--steps",
        str(steps),
        "--warmup",
        str(warmup),
        "--out",
        out,
        *(extra or []),
    ]
    if profile_out:
        worker += ["--profile-out", str(profile_out)]
    if nproc == 1:
        return [sys.executable, "-m", "autotune.train.trial.worker", *worker]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "autotune.train.trial.worker",
        *worker,
    ]


def launch(
    cfg: TrainConfig,
    *,
    steps: int = 20,
    warmup: int = 5,
    nproc: int = 1,
    timeout: float | None = None,
    log_path: str | os.PathLike | None = None,
    extra_env: dict[str, str] | None = None,
    profile_out: str | os.PathLike | None = None,
    profile_after: str | os.PathLike | None = None,
    profile_steps: int = 3,
    profile_if_above: float | None = None,
    on_step: Callable[[int, float], bool] | None = None,
    read_host: bool = True,
    source: str | os.PathLike | None = None,
) -> TrialRecord:
    """The run's record: its measurement, or its failure (reasons: timeout, crash, oom, nan, pruned, ...).

    With ``profile_out`` the processes profile a window into that folder instead of training
    (``autotune.train.window.profile``) and the record holds its ``profile`` alone. With
    ``profile_after`` they train and measure, then profile ``profile_steps`` steps into that folder
    (``record.profile``), only if the run reached ``profile_if_above`` samples/s where that is given.
    ``on_step(i, seconds)`` is called with each measured step's time while the run goes on; when it
    returns True the run is stopped and the record's failure is ``pruned``. ``extra_env`` is added to
    this process's environment for the run.

    Every record, a failure's too, carries the host's load just before the processes started
    (``record.host``, unless ``read_host`` is False) and where the run's time went (``record.cost``).
    ``source`` is the file ``cfg`` was read from: the failure of a check of its values names it
    (:mod:`autotune.config.named`).
    """
    for note in reap_orphans():
        print(f"note: {note}", file=sys.stderr)
    host = read_host_load() if read_host else None
    with tempfile.TemporaryDirectory(prefix=PREFIX) as tmp:
        costs = Path(tmp) / "costs"
        begin = time.monotonic()
        costs.write_text(json.dumps({"t": begin, "ev": "begin", "part": "start"}) + "\n")
        record = _run(
            cfg,
            Path(tmp),
            costs,
            steps=steps,
            warmup=warmup,
            nproc=nproc,
            timeout=timeout,
            log_path=log_path,
            extra_env=extra_env,
            profile_out=profile_out,
            profile_after=profile_after,
            profile_steps=profile_steps,
            profile_if_above=profile_if_above,
            on_step=on_step,
            source=source,
        )
        spent = cost.cost_of(cost.read_events(costs), begin, time.monotonic())
    return replace(record, host=host, cost=spent)


def training_env(
    cfg: TrainConfig, nproc: int, extra_env: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment of training processes started from here (a trial's, a job's under torchrun): this
    process's, the multi-GPU settings, the caller's extras, then the variables of the configuration's
    kernel and memory knobs (read when CUDA starts in the child). Not this process's place among
    processes (``ranks.PLACE``): a trial of one process is one process wherever autotune runs, and
    torchrun sets them for its own."""
    inherited = {k: v for k, v in os.environ.items() if k not in PLACE}
    env = {**inherited, **MULTI_GPU_ENV, **(extra_env or {})}
    env.update(cfg.environment(env))
    env.setdefault("OMP_NUM_THREADS", str(max(1, usable_cpus() // nproc)))
    return env


def _run(
    cfg: TrainConfig,
    tmp: Path,
    costs: Path,
    *,
    steps: int,
    warmup: int,
    nproc: int,
    timeout: float | None,
    log_path,
    extra_env,
    profile_out,
    profile_after,
    profile_steps: int,
    profile_if_above: float | None,
    on_step,
    source: str | os.PathLike | None,
) -> TrialRecord:
    config_path, out = str(tmp / "config.yaml"), str(tmp / "result.json")
    progress = tmp / "progress"
    save_config(cfg, config_path)
    env = training_env(cfg, nproc, extra_env)
    extra = ["--costs", str(costs)] + (["--progress", str(progress)] if on_step else [])
    if profile_after:
        extra += ["--profile-after", str(profile_after), "--profile-steps", str(profile_steps)]
        if profile_if_above is not None:
            extra += ["--profile-if-above", repr(float(profile_if_above))]
    if source is not None:
        extra += ["--source", str(source)]
    argv = command(
        config_path, out, steps, warmup, nproc, str(profile_out) if profile_out else None, extra
    )
    pump = open_log(log_path)
    oom_before = oom_kills()
    try:
        proc = start_trial(
            argv,
            folder=str(tmp),
            env=env,
            log=pump.writer if pump else subprocess.DEVNULL,
            fork=zygote_client.fork_trial,
        )
        if pump:
            pump.started()
        try:
            stopped = _wait(proc.popen, timeout, progress if on_step else None, on_step)
        except subprocess.TimeoutExpired:
            return TrialRecord.failed("timeout", f"the run did not finish within {timeout:.0f} s")
        finally:
            worker = proc.worker_pid()
            stop_trial(proc)  # stray children (loader workers, ranks) never outlive the run
        if stopped is not None:
            return TrialRecord.failed(
                "pruned", f"pruned after {stopped} measured steps", steps_run=stopped
            )
    finally:
        if pump:
            pump.close()  # after stop_trial: every copy of the pipe is closed, the log complete
    if getattr(proc.popen, "parent_lost", False):
        return _parent_lost(proc, Path(out))
    if Path(out).exists():
        record = TrialRecord.from_json(Path(out).read_text())
        if record.ok and proc.popen.returncode != 0:
            record = TrialRecord.failed("crash", f"exit code {proc.popen.returncode}")
        return record
    for rank_record in sorted(tmp.glob("result.json.rank*")):  # a rank other than 0 failed alone
        return TrialRecord.from_json(rank_record.read_text())
    return _no_result(proc, worker, oom_before, log_path, tmp)


def _parent_lost(proc: TrialProcess, out: Path) -> TrialRecord:
    """The record of a trial whose warm parent died under it: its result where the worker wrote
    one, else a loss of the machinery (``interrupted``: the study queues it again), never a verdict
    on the configuration."""
    if out.exists():
        try:
            record = TrialRecord.from_json(out.read_text())
            if record.ok:
                return record
        except (OSError, ValueError, KeyError, TypeError):
            pass  # cut by the kill: the run is measured again
    return TrialRecord.failed(
        INTERRUPTED,
        f"the warm parent (zygote) that forked the trial's guard (pid {proc.popen.pid}) died while "
        "the trial ran; not a failure of the configuration: queued again",
    )


def _no_result(
    proc: TrialProcess,
    worker: int | None,
    oom_before: int | None,
    log_path: str | os.PathLike | None,
    tmp: Path,
) -> TrialRecord:
    """The failure of a run that left no record: its exit status, read as what really happened."""
    if proc.popen.returncode is not None and proc.popen.returncode >= 0 and _full(tmp):
        # the guard or the worker could not write its files (its session, its record) there
        return TrialRecord.failed(
            INTERRUPTED,
            f"the trial's temporary folder {tmp.parent} has no space left, so the run could not "
            "write its record; not a failure of the configuration: queued again (free space "
            "there, or point TMPDIR at a disk with room)",
        )
    log_text = ""
    if log_path:
        try:
            with open(log_path, "rb") as f:  # torchrun's failure report is at the end
                f.seek(max(0, os.path.getsize(log_path) - 65536))
                log_text = f.read().decode(errors="replace")
        except OSError:
            pass
    pids = [p for p in (proc.popen.pid, worker) if p]
    reason, message = exit_failure(
        proc.popen.returncode, oom_before=oom_before, pids=pids, log_text=log_text
    )
    return TrialRecord.failed(reason, message)


FULL_BYTES = 1 << 20
"""Free bytes below which a disk cannot take a run's files (its record is a few KB, in whole blocks)."""


def _full(folder: Path) -> bool:
    """Whether the disk of ``folder`` is full for this process (root may write the reserved blocks)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    free = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    return free * st.f_frsize < FULL_BYTES


def _wait(
    proc: subprocess.Popen,
    timeout: float | None,
    progress: Path | None,
    on_step: Callable[[int, float], bool] | None,
) -> int | None:
    """Wait for the run; with a progress file, feed ``on_step`` and return the step count if it says stop."""
    if progress is None or on_step is None:
        proc.wait(timeout=timeout)
        return None
    deadline = None if timeout is None else time.monotonic() + timeout
    seen = 0
    while True:
        try:
            proc.wait(timeout=0.2)
            finished = True
        except subprocess.TimeoutExpired:
            finished = False
        text = progress.read_text() if progress.exists() else ""
        complete = text.split("\n")[:-1]  # the piece after the last newline is still being written
        for line in complete[seen:]:
            seen += 1
            if on_step(seen - 1, float(line)):
                return seen
        if finished:
            return None
        if deadline is not None and time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout)
