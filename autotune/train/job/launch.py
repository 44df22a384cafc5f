"""Several ranks of a job: torchrun in the foreground, its output on this terminal (but for its own
report of a failed rank, which the ranks make: :mod:`~autotune.train.job.torchrun`).

One node (``--nproc K``) uses torchrun's ``--standalone`` rendezvous; several nodes pass
``--nnodes``, ``--node-rank``, ``--rdzv-endpoint`` (and ``--rdzv-backend``, ``--rdzv-id``) through to
torchrun's own rendezvous: run the same command on every node. A SIGTERM to this process (what a
scheduler sends the job before preempting it), or a SIGHUP (its terminal closed), is forwarded to
the ranks, which agree on a step, save a checkpoint there and exit 0; torchrun then exits 0 too.
(Sent to torchrun itself, a SIGTERM makes torchrun kill its ranks after a grace period, checkpoint
or not; torchrun runs in a session of its own, out of reach of the terminal's SIGHUP.)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from autotune.config import TrainConfig, save_config
from autotune.hangup import output_may_be_gone, stop_requests
from autotune.train.job.training import JobOptions
from autotune.train.trial.launch import training_env


@dataclass(frozen=True)
class Nodes:
    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    rdzv_backend: str = "static"
    rdzv_id: str = "autotune"

    @property
    def several(self) -> bool:
        return self.nproc > 1 or self.nnodes > 1 or self.rdzv_endpoint is not None


def torchrun_command(nodes: Nodes, worker: list[str], debug: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "autotune.train.job.torchrun", *(["--debug"] if debug else [])]
    cmd.append(f"--nproc-per-node={nodes.nproc}")
    if nodes.rdzv_endpoint is None:
        cmd.append("--standalone")
    else:
        cmd += [
            f"--nnodes={nodes.nnodes}",
            f"--node-rank={nodes.node_rank}",
            f"--rdzv-endpoint={nodes.rdzv_endpoint}",
            f"--rdzv-backend={nodes.rdzv_backend}",
            f"--rdzv-id={nodes.rdzv_id}",
        ]
    return cmd + ["-m", "autotune.train.job.worker", *worker]


def _options_json(opts: JobOptions) -> str:
    return json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in asdict(opts).items()})


def options_from_json(text: str) -> JobOptions:
    data = json.loads(text)
    for key in ("output_dir", "init_from"):
        if data.get(key) is not None:
            data[key] = Path(data[key])
    return JobOptions(**data)


def _forward_stops(proc: subprocess.Popen) -> dict[int, Any]:
    """Forward each of :func:`~autotune.hangup.stop_requests` to the ranks torchrun (``proc``)
    started, from the main thread (elsewhere nothing is forwarded); the previous handlers."""
    import psutil

    def forward(signum, frame) -> None:
        output_may_be_gone()  # the job's result is printed here after the ranks saved
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(proc.pid).children():
                child.send_signal(signum)

    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, forward) for signum in stop_requests()}


def launch_job(
    cfg: TrainConfig,
    opts: JobOptions,
    nodes: Nodes,
    *,
    debug: bool = False,
    source: str | os.PathLike | None = None,
) -> tuple[int, dict[str, Any] | None]:
    """Run the job's ranks on this node through torchrun; (exit code, rank 0's result if it ran here).
    ``source``: the file ``cfg`` was read from, which the failure of a check of its values names."""
    with tempfile.TemporaryDirectory(prefix="autotune-job-") as tmp:
        config_path, result_path = Path(tmp) / "config.yaml", Path(tmp) / "result.json"
        save_config(cfg, config_path)
        worker = [
            "--config",
            str(config_path),
            "--options",
            _options_json(opts),
            "--result",
            str(result_path),
        ]
        if debug:
            worker.append("--debug")
        if source is not None:
            worker += ["--source", str(source)]
        env = training_env(cfg, nodes.nproc)
        proc = subprocess.Popen(
            torchrun_command(nodes, worker, debug), env=env, start_new_session=True
        )
        previous = _forward_stops(proc)
        try:
            code = proc.wait()
        except BaseException:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
            raise
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        result = json.loads(result_path.read_text()) if result_path.exists() else None
        return code, result
