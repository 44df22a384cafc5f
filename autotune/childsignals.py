"""What a process that is ending does about its children's ends."""

from __future__ import annotations

import signal


def children_may_end() -> None:
    """The process is stopping, and its data loader's workers end with it (the same signal reached
    them, or it kills them): the loader's SIGCHLD handler would print each end as an error
    ("DataLoader worker is killed by signal") from wherever the exit happens to be. Its place takes
    a handler that does nothing, not SIG_DFL: a SIGCHLD already pending for the old handler would
    then be reported as "ignored due to race condition"."""
    if hasattr(signal, "SIGCHLD"):
        signal.signal(signal.SIGCHLD, _nothing)


def _nothing(signum, frame) -> None:
    return None
