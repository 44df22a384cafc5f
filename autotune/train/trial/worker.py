"""One process of a training run: ``python -m autotune.train.trial.worker --config C --out R.json``.

Started directly (one process) or by torchrun (several). Rank 0 writes the run's
:class:`~autotune.train.trial.record.TrialRecord` (its measurement, or its failure with the reason) to
``--out`` as JSON; a rank that fails writes its own beside it. The exit code is non-zero on error.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from autotune.config import load_config
from autotune.config.io import write_text_atomic
from autotune.config.named import naming_file
from autotune.errors import AutotuneError, DataError, TrialError, is_out_of_memory
from autotune.ranks import rank_or_zero
from autotune.train import memcap
from autotune.train.trial.record import ProfileSummary, TrialRecord
from autotune.train.window import cost

TRACEBACK_CHARS = 4000
"""The end of a failed run's traceback kept in its record."""


def classify_exception(exc: BaseException) -> tuple[str, str]:
    """(reason, message) of a failed run: oom, nan, nccl, compile, data, config or error."""
    text = f"{type(exc).__name__}: {exc}"
    low = text.lower()
    if isinstance(exc, TrialError):
        return exc.reason, str(exc)
    if isinstance(exc, DataError):  # the dataset is at fault, whatever the configuration
        return "data", str(exc)
    if isinstance(exc, AutotuneError):
        return "config", str(exc)
    if isinstance(exc, MemoryError) and not str(exc):  # Python's own says nothing more
        return "oom", "MemoryError: the host's memory ran out"
    if is_out_of_memory(exc):
        return "oom", text.splitlines()[0]
    if "nccl" in low and "gloo" not in low and "required cuda" not in low:
        return "nccl", text.splitlines()[0]
    if "inductor" in low or "dynamo" in low or "backendcompilerfailed" in low:
        return "compile", text.splitlines()[0]
    return "error", text.splitlines()[0]


def _peak_of(exc: BaseException) -> tuple[int, int] | None:
    """(peak, budget) of an out-of-memory run under a memory budget (None without one)."""
    if isinstance(exc, memcap.OverBudget):
        return exc.peak_bytes, exc.budget_bytes
    try:
        return memcap.current_peak()
    except Exception:  # noqa: BLE001  a device that failed may not answer: the failure stands
        return None


def _progress_writer(path: str):
    """A callback appending one line per measured step (seconds), flushed, for the tuner to read."""
    f = open(path, "a", buffering=1)  # noqa: SIM115  closed at exit

    def write(seconds: float) -> None:
        f.write(f"{seconds:.9f}\n")

    return write


def main(argv: list[str] | None = None) -> int:
    from autotune import quiet

    quiet.install()
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--profile-out", default=None, help="profile a window into this folder instead of training"
    )
    ap.add_argument(
        "--profile-after",
        default=None,
        help="after the measured steps, profile a window into this folder",
    )
    ap.add_argument(
        "--profile-steps", type=int, default=3, help="profiled steps of --profile-after"
    )
    ap.add_argument(
        "--profile-if-above",
        type=float,
        default=None,
        metavar="SAMPLES_PER_S",
        help="with --profile-after: profile only a run whose samples/s is at least this",
    )
    ap.add_argument(
        "--progress", default=None, help="append each measured step's seconds to this file (rank 0)"
    )
    ap.add_argument(
        "--costs", default=None, help="append where the run's time goes to this file (rank 0)"
    )
    ap.add_argument(
        "--source",
        default=None,
        help="the file the configuration was read from (--config is a copy): the failure of a "
        "check of its values names it",
    )
    args = ap.parse_args(argv)
    rank = rank_or_zero()
    cost.install(args.costs if rank == 0 else None)
    try:
        with naming_file(args.source):
            record = _run(args, rank)
        code = 0
    except BaseException as exc:  # noqa: BLE001  a failed run is data: record it and exit non-zero
        reason, message = classify_exception(exc)
        peak = _peak_of(exc) if reason == "oom" else None
        trained = exc.trained if isinstance(exc, memcap.OverBudget) else None
        record = TrialRecord.failed(
            reason,
            message,
            traceback=traceback.format_exc()[-TRACEBACK_CHARS:],
            peak_bytes=peak[0] if peak else None,
            budget_bytes=peak[1] if peak else None,
            losses=trained[0] if trained else None,
            grad_norms=trained[1] if trained else None,
        )
        code = 1
    cost.write_counters()
    if rank == 0 or code:
        out = args.out if rank == 0 else f"{args.out}.rank{rank}"
        write_text_atomic(out, record.to_json())
    return leave(code)


def _run(args: argparse.Namespace, rank: int) -> TrialRecord:
    """The run the arguments ask for: a profiled window (``--profile-out``), else measured steps."""
    if args.profile_out:
        from autotune.train.window.profile import profile_config

        cost.event("end", "start")
        summary = profile_config(
            load_config(args.config), args.profile_out, warmup=args.warmup, active=args.steps
        )
        return TrialRecord(profile=ProfileSummary.of_summary(summary))
    from autotune.train.window.runner import run_training

    cost.event("end", "start")  # the launcher began it: interpreter and imports are done
    progress = _progress_writer(args.progress) if args.progress and rank == 0 else None
    return run_training(
        load_config(args.config),
        steps=args.steps,
        warmup=args.warmup,
        progress=progress,
        profile_out=args.profile_after,
        profile_steps=args.profile_steps,
        profile_if_above=args.profile_if_above,
    ).record()


def leave(code: int) -> int:
    """Close the process group (after a barrier when this rank succeeded) and return ``code``."""
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            if code == 0:  # leave together: a gloo rank that leaves first can abort its peer
                dist.barrier()
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    return code


def exit_now(code: int) -> None:
    """End the process without Python's finalisation: the record and the costs are written, and
    tearing down torch, Dynamo and their threads took 0.9 s of a 6-s CPU trial (the launcher kills
    whatever of the trial is left: loader workers, compile workers)."""
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
