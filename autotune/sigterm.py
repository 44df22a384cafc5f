"""SIGTERM as the exception :class:`Terminated`, raised in the main thread where it can propagate;
SIGHUP (a hang-up: the terminal or the ssh session is gone) likewise, but where ``nohup`` ignores
it (:mod:`autotune.hangup`).

The command line turns those signals into an exception so that ``finally`` blocks run: a killed
``run`` stops its trial's process group and removes its temporary folder. A signal handler runs
wherever the main thread is, and in two kinds of places its raise would not end the command with
its one line:

* inside a ``__del__``, a weakref callback or a garbage collection (a pipe's ``__del__`` runs as
  each loader batch is received). Python prints "Exception ignored in" with the traceback, drops
  the exception and runs on. Inside a ``__del__`` the handler does not raise, and a stop dropped
  elsewhere reaches :func:`stop_again`: either way the signal is made again once the main thread
  is out of the place.
* inside an import. The import machinery is Python code: a raise between a module's execution
  and its binding on its package leaves it in ``sys.modules`` but not on the package, and C code
  that imports (torch's initialisation of numpy) clears the error and goes on; the run then fails
  later (numpy's lazy ``__getattr__`` recursing for ``np.linalg``), or never stops. The stop waits
  until the main thread is out of the import (:data:`IMPORT_WAIT_S` at most).

A stop that waits may let the main thread meet what the signal did to the rest of the process
group meanwhile (a loader's worker gone): :func:`received` tells the command line that the error
is the stop's doing. While children start, :func:`autotune.childsignals.stops_held` holds the
signal.
"""

from __future__ import annotations

import _thread
import functools
import importlib._bootstrap
import importlib._bootstrap_external
import signal
import sys
import threading
import time
from collections.abc import Callable

from autotune.childsignals import children_may_end
from autotune.hangup import output_may_be_gone, stop_requests

_IMPORT_FILES = frozenset(
    {
        importlib._bootstrap._find_and_load.__code__.co_filename,
        importlib._bootstrap_external.FileLoader.get_data.__code__.co_filename,
    }
)
"""The files of the import machinery's code (``<frozen importlib._bootstrap>`` and ``_external``)."""

IMPORT_WAIT_S = 10.0
"""The longest a stop waits for imports to end: one that waits on something else may never end."""

_received: list[tuple[float, int]] = []
"""When this process's stop signal came, and which (empty: none since :func:`exit_on_sigterm`)."""


class Terminated(SystemExit):
    """A stop signal, raised in the main thread (its code ``128 + signal``, the shell's for it)."""


def exit_on_sigterm() -> dict[int, object] | None:
    """Turn SIGTERM, and SIGHUP where it is not ignored, into :class:`Terminated` in this process
    (from its main thread; elsewhere nothing is done and None returned). Returns the previous
    handlers."""
    if threading.current_thread() is not threading.main_thread():
        return None
    _received.clear()
    return {signum: signal.signal(signum, _terminate) for signum in stop_requests()}


def restore(previous: dict[int, object] | None) -> None:
    """Put back ``previous`` (:func:`exit_on_sigterm`'s return; None: nothing to put back). After a
    stop, a handler that does nothing takes their place instead: a signal made again while the stop
    waited (:func:`_signal_main_when`) may be on its way, and with the default handler back Python
    would print "Signal 15 ignored due to race condition" as the process ends."""
    for signum, handler in (previous or {}).items():
        signal.signal(signum, _nothing if received() else handler)


def _nothing(signum, frame) -> None:
    return None


def received() -> bool:
    """Whether a stop signal came since :func:`exit_on_sigterm`, raised yet or not."""
    return bool(_received)


def stop_signal() -> int:
    """The first stop signal that came (SIGTERM where none did)."""
    return _received[0][1] if _received else signal.SIGTERM


def _terminate(signum, frame) -> None:
    children_may_end()  # a scheduler's SIGTERM reaches the loader's workers too, now
    output_may_be_gone()  # before the clean-up prints where a hang-up left no reader
    if not _received:
        _received.append((time.monotonic(), signum))
    if not _safe(frame):
        _signal_main_when(_safe, signum)
        return
    raise Terminated(128 + signum)


def _safe(frame) -> bool:
    """Whether a raise from ``frame`` ends the command as it should (see the module docstring)."""
    return not _dropping(frame) and (not _importing(frame) or _import_wait_over())


def stop_again(hook):
    """``sys.unraisablehook`` that does not drop a :class:`Terminated` (see the module docstring).
    Anything else goes to ``hook``."""
    return functools.partial(_unraisable, hook)


def _unraisable(hook, unraisable) -> None:
    if isinstance(unraisable.exc_value, Terminated):
        _signal_main_when(_safe, unraisable.exc_value.code - 128)
        return
    hook(unraisable)


def _dropping(frame) -> bool:
    """Whether a raise from ``frame`` would be dropped: it runs inside a ``__del__`` or inside
    :func:`_unraisable` (Python calls both from C and prints, then drops, what they raise)."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or code is _unraisable.__code__:
            return True
        frame = frame.f_back
    return False


def _importing(frame) -> bool:
    """Whether ``frame`` runs inside an import (the import machinery's code is on its stack)."""
    while frame is not None:
        if frame.f_code.co_filename in _IMPORT_FILES:
            return True
        frame = frame.f_back
    return False


def _import_wait_over() -> bool:
    """Whether the stop has waited :data:`IMPORT_WAIT_S` (for imports) since it came."""
    return not _received or time.monotonic() - _received[0][0] > IMPORT_WAIT_S


def _signal_main_when(ready: Callable[[object], bool], signum: int) -> None:
    """Make ``signum`` for the main thread's handler once ``ready(its innermost frame)`` holds.

    From another thread: the main thread handles a signal right after the call that makes it
    (``_thread.interrupt_main``), so made by the main thread itself it would be handled where it
    is now, the place it must leave first."""
    threading.Thread(target=_wait_then_signal, args=(ready, signum), daemon=True).start()


def _wait_then_signal(ready: Callable[[object], bool], signum: int) -> None:
    main = threading.main_thread().ident
    while not ready(sys._current_frames().get(main)):
        time.sleep(0.001)
    _thread.interrupt_main(signum)
