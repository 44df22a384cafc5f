"""One rank of a several-process job, as torchrun starts it (``job_launch``):

    python -m autotune.train.job.worker --config C.yaml --options '{...}' --result R.json

Rank 0 writes the job's result (or ``{"error", "reason"}``) to ``--result``, and the command that
started torchrun prints its error; another rank that fails prints its own on one line, but for
:class:`~autotune.train.job.control.FailedElsewhere` (the rank that failed says why). Every failing
rank exits non-zero; with ``--debug`` each prints its traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback

from autotune.config import load_config
from autotune.config.io import write_text_atomic
from autotune.config.named import naming_file
from autotune.ranks import rank_or_zero
from autotune.train.job.control import FailedElsewhere
from autotune.train.job.launch import options_from_json
from autotune.train.job.training import run_job
from autotune.train.trial.worker import classify_exception, leave


def main(argv: list[str] | None = None) -> int:
    from autotune import quiet

    quiet.install()
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--options", required=True)
    ap.add_argument("--result", required=True)
    ap.add_argument("--debug", action="store_true")
    ap.add_argument("--source", default=None, help="as the trial worker's --source")
    args = ap.parse_args(argv)
    rank = rank_or_zero()
    try:
        with naming_file(args.source):
            result = run_job(load_config(args.config), options_from_json(args.options)).to_dict()
        code = 0
    except BaseException as exc:  # noqa: BLE001  reported on one line, the exit code says it failed
        reason, message = classify_exception(exc)
        result = {"error": message, "reason": reason}
        if args.debug or not _told_elsewhere(rank, exc):
            print(
                traceback.format_exc()
                if args.debug
                else f"autotune: error (rank {rank}): {message}",
                file=sys.stderr,
                flush=True,
            )
        code = 1
    if rank == 0:
        write_text_atomic(args.result, json.dumps(result))
    return leave(code)


def _told_elsewhere(rank: int, exc: BaseException) -> bool:
    """Rank 0's error is printed by the command that started torchrun, from the result; another
    rank's error is printed by that rank."""
    return rank == 0 or isinstance(exc, FailedElsewhere)


if __name__ == "__main__":
    sys.exit(main())
