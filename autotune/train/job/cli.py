"""``autotune train --max-steps N ...``: the long job's options and its command (``job``).

    python -m autotune train --config best.yaml --max-steps 2000 --save-steps 500 --output-dir runs/ft
    python -m autotune train --config best.yaml --max-steps 2000 --output-dir runs/ft --init-from GR00T-N1.6-3B
    python -m autotune train --config best.yaml --max-steps 2000 --output-dir /shared/ft --nproc 8 \\
        --nnodes 2 --node-rank 0 --rdzv-endpoint node0:29500      # the same on node 1 with --node-rank 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from autotune.argtypes import NON_NEGATIVE, POSITIVE, not_a_url
from autotune.config import TrainConfig
from autotune.config.compat import resolved
from autotune.errors import ConfigError, TrialError


def add_arguments(p: argparse.ArgumentParser) -> None:
    job = p.add_argument_group(
        "training job (with --max-steps; without it, train measures --steps steps)"
    )
    job.add_argument(
        "--max-steps", type=POSITIVE, help="train steps 1..N (the learning-rate schedule spans N)"
    )
    job.add_argument(
        "--output-dir",
        type=_folder,
        help="checkpoints, metrics.jsonl and tensorboard/; the same "
        "command again resumes after its newest complete checkpoint",
    )
    job.add_argument(
        "--save-steps",
        type=POSITIVE,
        help="write D/checkpoint-<step> every K steps (the end is always saved)",
    )
    job.add_argument("--save-total-limit", type=POSITIVE, help="keep only the newest L checkpoints")
    job.add_argument(
        "--log-steps", type=POSITIVE, default=10, help="metrics every M steps (default 10)"
    )
    job.add_argument(
        "--init-from",
        type=_folder,
        help="start from an upstream checkpoint (Hugging Face safetensors "
        "with model.safetensors.index.json, e.g. the released GR00T N1.6 weights)",
    )
    job.add_argument(
        "--stop-at", type=POSITIVE, help="train up to this step of the schedule, save and exit 0"
    )
    job.add_argument("--no-progress", action="store_true", help="no progress bar")
    job.add_argument(
        "--nnodes",
        type=POSITIVE,
        default=1,
        help="nodes (torchrun's rendezvous; run the command on each)",
    )
    job.add_argument(
        "--node-rank", type=NON_NEGATIVE, default=0, help="this node's rank among --nnodes"
    )
    job.add_argument(
        "--rdzv-endpoint", help="HOST:PORT of the rendezvous (torchrun's --rdzv-endpoint)"
    )
    job.add_argument(
        "--rdzv-backend",
        default="static",
        help="torchrun's rendezvous backend: static (ranks by "
        "--node-rank, the endpoint is the master) or c10d",
    )
    job.add_argument(
        "--rdzv-id", default="autotune", help="torchrun's --rdzv-id (the same on every node)"
    )


def _folder(text: str) -> Path:
    """An argparse type: a folder's path, resolved. An empty one (an unset shell variable) would be
    this folder, where the job would train and resume unasked; a URL, a folder ``https:`` here."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r} is empty; allowed: a folder's path ('.' for this one)"
        )
    return resolved(Path(not_a_url(text)), argparse.ArgumentTypeError)


def check_mode(args: argparse.Namespace) -> None:
    """The measuring run and the job take different options: refuse a mix."""
    job_only = [
        f
        for f in ("output_dir", "save_steps", "save_total_limit", "init_from", "stop_at")
        if getattr(args, f, None) is not None
    ]
    if args.max_steps is None:
        if job_only:
            raise ConfigError(
                f"--{job_only[0].replace('_', '-')} belongs to a training job: give --max-steps N"
            )
        return
    if args.steps is not None or args.warmup is not None:
        raise ConfigError(
            "--steps/--warmup measure a run; a training job takes --max-steps (its steps all train)"
        )
    if args.output_dir is None:
        raise ConfigError("--max-steps needs --output-dir (where checkpoints and metrics go)")
    _check_nodes(args)


RDZV_BACKENDS = ("static", "c10d")


def _check_nodes(args: argparse.Namespace) -> None:
    """Options of several nodes that can meet: torchrun refuses the others with a traceback, or
    (no endpoint, a node rank past the nodes) each node trains alone into the shared folder."""
    if args.nnodes > 1 and args.rdzv_endpoint is None:
        raise ConfigError(
            f"--nnodes {args.nnodes} needs --rdzv-endpoint HOST:PORT (the rendezvous every node "
            "joins); without it each node would train alone into the same --output-dir"
        )
    if args.node_rank >= args.nnodes:
        raise ConfigError(
            f"--node-rank: {args.node_rank} is out of range; allowed: 0 to {args.nnodes - 1} "
            f"(one less than --nnodes {args.nnodes})"
        )
    if args.rdzv_endpoint is not None:
        host, _, port = args.rdzv_endpoint.rpartition(":")
        if not (host and port.isdigit() and 1 <= int(port) <= 65535):
            raise ConfigError(
                f"--rdzv-endpoint: {args.rdzv_endpoint!r} is not HOST:PORT; allowed: e.g. "
                "node0:29500 (a port from 1 to 65535)"
            )
    if args.rdzv_backend not in RDZV_BACKENDS:
        raise ConfigError(
            f"--rdzv-backend: {args.rdzv_backend!r} is not one of {list(RDZV_BACKENDS)}"
        )


def run(args: argparse.Namespace, cfg: TrainConfig, source: str | None = None) -> int:
    """The job ``args`` ask for, of ``cfg`` (read from the file ``source``, which the failure of a
    check of its values in the ranks torchrun starts names)."""
    from autotune.train.job.launch import Nodes
    from autotune.train.job.training import JobOptions

    opts = JobOptions(
        max_steps=args.max_steps,
        output_dir=args.output_dir.resolve(),
        save_steps=args.save_steps,
        save_total_limit=args.save_total_limit,
        log_steps=args.log_steps,
        init_from=args.init_from.resolve() if args.init_from else None,
        stop_at=args.stop_at,
        progress=not args.no_progress,
    )
    nodes = Nodes(
        args.nproc, args.nnodes, args.node_rank, args.rdzv_endpoint, args.rdzv_backend, args.rdzv_id
    )
    with _owned(opts.output_dir, nodes):
        result = _train(args, cfg, opts, nodes, source)
    if result is None:  # rank 0 runs on another node
        return 0
    if args.json:
        print(json.dumps(result))
    else:
        _print(result)
    if result.get("stopped_by") == "SIGINT":  # stopped, not done: a script's next command waits
        print(f"autotune: interrupted {_where(result, opts)}", file=sys.stderr)
        return 130
    return 0


def _where(r: dict, opts) -> str:
    """Where a job stopped by Ctrl-C left off: the step saved (or none trained since the last)."""
    step = r["final_step"]
    if r["losses"]:
        kept = f"saved as {opts.output_dir / f'checkpoint-{step}'}"
    else:
        kept = "nothing trained since " + (r["resumed_from"] or "the start")
    return f"at step {step} of {r['max_steps']}: {kept}; the same command continues"


@contextlib.contextmanager
def _owned(folder: Path, nodes) -> Iterator[None]:
    """``folder`` owned by this job (a second job there is refused, :mod:`autotune.ownership`), and
    holding no other program's files under a job's names (:mod:`autotune.train.job.folder`). On
    several nodes the folder is shared by design: the node of rank 0 owns it (with the static
    rendezvous, the only one whose ranks are known before it starts), the others leave it be."""
    from autotune.ownership import own_folder
    from autotune.train.job.folder import check_job_folder

    if nodes.nnodes > 1 and not (nodes.rdzv_backend == "static" and nodes.node_rank == 0):
        yield
        return
    with own_folder(folder, "autotune train", "--output-dir"):
        check_job_folder(folder)
        yield


def _train(
    args: argparse.Namespace, cfg: TrainConfig, opts, nodes, source: str | None
) -> dict | None:
    from autotune.train.job.launch import launch_job
    from autotune.train.job.training import run_job

    if nodes.several:
        debug = getattr(args, "debug", False)
        code, result = launch_job(cfg, opts, nodes, debug=debug, source=source)
        if result is not None and "error" in result:
            raise TrialError(
                f"training failed ({result['reason']}): {result['error']}", result["reason"]
            )
        if code != 0:
            raise TrialError(f"torchrun exited with code {code}", "crash")
        return result
    for name, value in cfg.kernels.environment().items():
        os.environ.setdefault(name, value)
    os.environ.update(cfg.memory.environment(os.environ))  # merged with the user's options
    # in this process: train.cli names the file of a value it refuses
    return run_job(cfg, opts).to_dict()


def _print(r: dict) -> None:
    trained = len(r["losses"])
    where = f"resumed from {r['resumed_from']}" if r["resumed_from"] else "from the start"
    # a rank that met no signal itself stopped with the others at the step they agreed on
    by = r["stopped_by"] or "a signal to another rank"
    stopped = f"; stopped by {by}" if r["preempted"] else ""
    if not trained:  # stopped before its first step, or resumed at its --stop-at
        print(f"trained nothing: at step {r['final_step']} of {r['max_steps']} ({where}){stopped}")
        return
    print(
        f"trained steps {r['start_step']}..{r['final_step']} of {r['max_steps']} ({trained} steps, {where})"
        + stopped
    )
    print(f"  loss          {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}")
    if r["samples_per_s"]:
        print(
            f"  samples/s     {r['samples_per_s']:.2f} (median step {r['step_time_ms']:.1f} ms); "
            f"{r['samples_per_s_overall']:.2f} with every stall"
        )
    for c in r["checkpoints"]:
        print(
            f"  {c['path']}  {c['bytes'] / 2**30:.2f} GiB, {c['snapshot_s']:.2f} s at the step, "
            f"{c['write_s']:.1f} s written in the background"
        )
