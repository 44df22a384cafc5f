"""torchrun for a job's ranks, without its own report when a rank fails (with ``--debug`` first,
torchrun as it is):

    python -m autotune.train.job.torchrun [--debug] --nproc-per-node=2 --standalone -m autotune.train.job.worker ...

Each rank that fails says why itself, or through rank 0's result, which the command that started
torchrun prints (:mod:`~autotune.train.job.worker`); torchrun's log of each rank's exit, its
traceback and its table of failures would only bury that line. A rank that a signal ended could
say nothing, so it is named here on one line, but for SIGTERM: that is how torchrun stops the other
ranks once one has failed (a job's ranks take a SIGTERM sent to them as a request to save and exit 0).
"""

from __future__ import annotations

import logging
import signal
import sys

EXITS_LOG = "torch.distributed.elastic.multiprocessing.api"
"""The logger torchrun names each rank's failure and its stop of the others in."""


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--debug"]:
        torchrun(argv[1:])
        return 0
    logging.getLogger(EXITS_LOG).setLevel(logging.CRITICAL)
    try:
        torchrun(argv)
    except ChildFailedError as exc:
        for rank, failure in sorted(exc.failures.items()):
            if failure.exitcode < 0 and -failure.exitcode != signal.SIGTERM:
                print(
                    f"autotune: error (rank {rank}): killed by {failure.signal_name()} "
                    f"(pid {failure.pid})",
                    file=sys.stderr,
                    flush=True,
                )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
