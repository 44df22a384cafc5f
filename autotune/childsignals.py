"""What a process does about signals while it starts children, and about its children's ends."""

from __future__ import annotations

import contextlib
import functools
import signal
import sys
import threading
from collections.abc import Iterator

STOPS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name)
)
"""The signals whose handlers stop the process by raising (``Terminated``, ``KeyboardInterrupt``)."""

_LOADER_SIGNALS = "torch.utils.data._utils.signal_handling"
"""torch's module that installs the data loader's SIGCHLD handler, once per process."""


def children_may_end() -> None:
    """The process is stopping, and its data loader's workers end with it (the same signal reached
    them, or it kills them): the loader's SIGCHLD handler would print each end as an error
    ("DataLoader worker is killed by signal") from wherever the exit happens to be. Its place takes
    a handler that does nothing, not SIG_DFL: a SIGCHLD already pending for the old handler would
    then be reported as "ignored due to race condition".

    A loader that is starting its workers right now (its start is held, :func:`stops_held`) has not
    yet installed that handler: torch's flag that it is installed is set, so that it does not put
    it back over this one."""
    if hasattr(signal, "SIGCHLD"):
        signal.signal(signal.SIGCHLD, _nothing)
        loader = sys.modules.get(_LOADER_SIGNALS)
        if loader is not None:
            loader._SIGCHLD_handler_set = True


def _nothing(signum, frame) -> None:
    return None


def quiet_while_stopping() -> None:
    """Wrap the data loader's SIGCHLD handler (torch installs it once, as a loader first starts its
    workers) so that it reports nothing to a stop signal's handler that is starting.

    A signal to the process group ends the workers too, and their SIGCHLD can come while the
    SIGTERM handler begins: Python runs pending handlers at the first instruction of a handler
    too, so the loader's raised "DataLoader worker is killed by signal: Terminated" (a traceback,
    exit 1) before the SIGTERM handler's own first line (:func:`children_may_end`) ran."""
    if not hasattr(signal, "SIGCHLD") or threading.current_thread() is not threading.main_thread():
        return
    report = signal.getsignal(signal.SIGCHLD)
    if callable(report) and report is not _nothing and not _quiet(report):
        signal.signal(signal.SIGCHLD, functools.partial(_report_unless_stopping, report))


def _quiet(handler) -> bool:
    return isinstance(handler, functools.partial) and handler.func is _report_unless_stopping


def _report_unless_stopping(report, signum, frame) -> None:
    if not _in_stop_handler(frame):
        report(signum, frame)


def _in_stop_handler(frame) -> bool:
    """Whether ``frame`` runs inside the handler of one of :data:`STOPS`."""
    codes = {getattr(signal.getsignal(signum), "__code__", None) for signum in STOPS} - {None}
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def stops_held() -> Iterator[None]:
    """Hold SIGTERM, SIGINT and SIGHUP while the code inside starts child processes; deliver them
    after.

    Their handlers raise wherever the main thread is, and a raise in the middle of a start leaves
    a half-made thing whose clean-up fails on its own words: a DataLoader iterator stopped inside
    its ``__init__`` prints an AttributeError from its ``__del__`` ("no attribute '_shutdown'",
    "'_workers_status'") under the command's one line; a child started but not yet handed to the
    code that stops it is left running. Held, a signal is only noted (and the children's ends
    made quiet: :func:`children_may_end`); once the previous handlers are back it is raised again,
    so that it takes the course it would have taken, from the first line after the block.

    A child forked inside inherits the noting handler until it sets its own: a signal to the
    process group that reaches it then does not stop it, and the process that started it stops it
    (an iterator dropped by the raise stops its workers). Handlers are set in the main thread only:
    elsewhere the block holds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []

    def note(signum, frame) -> None:
        noted.append(signum)
        children_may_end()

    previous = _replace_handlers(note)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(noted):
            signal.raise_signal(signum)


def _replace_handlers(handler) -> dict[int, object]:
    """Set ``handler`` for each of :data:`STOPS` that would stop the process; returns the previous
    handlers. An ignored signal stops nothing and is left alone, and so is one whose handler was
    set outside Python (``getsignal`` None), which could not be put back."""
    previous = {}
    for signum in STOPS:
        if signal.getsignal(signum) not in (None, signal.SIG_IGN):
            previous[signum] = signal.signal(signum, handler)
    return previous
