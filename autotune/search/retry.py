"""A shared database that goes away for a moment (a restart, a failover, a dropped connection) does
not end the study: every call of the storage is retried with backoff for a bounded time.

:func:`retrying` wraps the methods of an ``RDBStorage`` instance in place (the object stays
an ``RDBStorage``, so Optuna's cache and heartbeat machinery treat it as before). A call that fails
because the server cannot be reached is repeated after 0.5, 1, 2, 4, ... seconds (at most
``MAX_WAIT_S`` apart) until ``OUTAGE_S`` have passed since the first failure; then it raises one
line naming the storage (redacted) and the driver's reason, and saying that the study is kept
there. A call made inside another (a method that calls another) is not retried on its own:
the outermost call owns the one deadline. A heartbeat that fails is skipped, not raised: the next
one is due shortly, and a trial's own calls decide whether the outage ends the run. What a tuner
stopped by a signal records on its way out is tried once (:func:`without_retries`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.exceptions import StorageInternalError

from autotune.errors import ConfigError, first_line, printable

OUTAGE_S = 120.0
"""Seconds a call keeps trying after its first failure to reach the server."""
MAX_WAIT_S = 10.0
"""Longest pause between two tries."""
QUOTED_CHARS = 200
"""Most characters of Optuna's message quoted from a stored value it could not read."""

_depth = threading.local()


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) says the server could not be reached, as opposed to a
    query the server refused (which no retry fixes)."""
    while exc is not None:
        if isinstance(exc, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)):
            return True
        if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.connection_invalidated:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _call(
    method: Callable, shown: str, reason: Callable[[BaseException], str], outage_s: float
) -> Callable:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(_depth, "n", 0)
        _depth.n = depth + 1
        try:
            if depth:  # inside a retried call: it retries the whole
                return method(*args, **kwargs)
            return _with_retries(method, args, kwargs, shown, reason, outage_s)
        finally:
            _depth.n = depth

    return call


def failed(exc: BaseException) -> bool:
    """Whether ``exc`` is the database's own error (Optuna wraps one that a commit raises). Not what
    Optuna makes of one (``DuplicatedStudyError`` from a duplicate key): its callers expect those."""
    return isinstance(exc, (sqlalchemy.exc.SQLAlchemyError, StorageInternalError))


def _with_retries(method, args, kwargs, shown: str, reason, outage_s: float) -> Any:
    first, wait = None, 0.5
    while True:
        try:
            return method(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001  only an unreachable server is retried
            if not unreachable(exc) and failed(exc):
                # a server that answers but refuses (read-only after a failover, a role without
                # rights): no retry helps, and Optuna's message blames the data
                raise ConfigError(
                    f"{shown}: the database refused the study's request ({reason(exc)}); "
                    "the study is kept there as it was before it: once the database takes its "
                    "requests again, run the same command to continue it"
                ) from None
            damaged = _damaged_row(exc, shown)
            if damaged is not None:
                raise damaged from None
            if not unreachable(exc):
                raise
            now = time.monotonic()
            first = now if first is None else first
            if now - first >= outage_s:
                raise ConfigError(
                    f"{shown}: the database did not answer for {outage_s:.0f} s ({reason(exc)}); "
                    "the study is kept there: run the same command again to continue it"
                ) from None
            time.sleep(min(wait, MAX_WAIT_S, max(0.0, first + outage_s - now)))
            wait *= 2


def _damaged_row(exc: BaseException, shown: str) -> ConfigError | None:
    """The one line for a value of the study that Optuna's loader fails to read, deep inside its
    reads (a row a hand or a damaged disk changed); None for any other error."""
    if isinstance(exc, (json.JSONDecodeError, RecursionError)):
        # a value Optuna keeps as JSON text (an attribute, a distribution), or nested past
        # Python's stack
        return ConfigError(
            f"{shown}: the study there holds a value that is not JSON ({exc}); it is "
            "left as it is: repair or delete that row, or continue in another database"
        )
    if unreadable_distribution(exc):
        return ConfigError(
            f"{shown}: the study there holds a parameter whose distribution (or value in it) "
            f"Optuna cannot read ({_quoted(exc)}); it is left as it is: repair or delete "
            "that row of trial_params, or continue in another database"
        )
    return None


DISTRIBUTION_READERS = frozenset({"json_to_distribution", "to_external_repr"})
"""Functions of ``optuna.distributions`` that a storage calls on what it holds only: a parameter's
distribution (its JSON) and its value in that distribution."""


def unreadable_distribution(exc: BaseException) -> bool:
    """Whether ``exc`` is Optuna failing to read a stored distribution that is JSON but not one
    (an unknown name or type, missing or unknown attributes, a choice index past the choices):
    a row changed by hand, which Optuna's reader meets deep inside loading the trials."""
    if not isinstance(exc, (LookupError, TypeError, ValueError)):
        return False
    return any(
        frame.f_code.co_name in DISTRIBUTION_READERS
        and frame.f_globals.get("__name__") == "optuna.distributions"
        for frame, _ in traceback.walk_tb(exc.__traceback__)
    )


def _quoted(exc: BaseException) -> str:
    """``ValueError: Unknown distribution class: X``, on one line, cut and escaped: the text may
    quote what the row holds."""
    text = printable(f"{type(exc).__name__}: {first_line(exc)}")
    return text if len(text) <= QUOTED_CHARS else f"{text[: QUOTED_CHARS - 3]}..."


def _skipped_on_failure(method: Callable) -> Callable:
    """``method`` tried once: a heartbeat the server does not take is skipped (the next one is due
    shortly), and no beat waits out an outage in the thread its trial's end joins, nor ends that
    thread with a traceback."""

    @functools.wraps(method)
    def beat(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001  only the database's own errors are skipped
            if not failed(exc):
                raise
            return None  # a database that refuses it refuses the trial's own calls, which say so

    return beat


@contextlib.contextmanager
def without_retries() -> Iterator[None]:
    """Calls of the storage in the body are tried once, an unreachable server raising at once: for
    what a stopping tuner records on its way out, which must not hold the stop up for an outage."""
    depth = getattr(_depth, "n", 0)
    _depth.n = depth + 1  # as inside a retried call, which retries the whole instead
    try:
        yield
    finally:
        _depth.n = depth


def retrying(
    storage: optuna.storages.RDBStorage,
    shown: str,
    reason: Callable[[BaseException], str],
    outage_s: float | None = None,
) -> optuna.storages.RDBStorage:
    """``storage`` with its methods retried through an outage of up to ``outage_s`` seconds
    (default :data:`OUTAGE_S`; see the module docstring); ``shown`` names the storage (its flag
    or variable and the redacted URL),
    ``reason(exc)`` the driver's message without secrets."""
    outage_s = OUTAGE_S if outage_s is None else outage_s
    for name in dir(type(storage)):  # Optuna's cache calls some private ones (``_get_trials``)
        if name.startswith("__") or not callable(getattr(type(storage), name, None)):
            continue
        setattr(storage, name, _call(getattr(storage, name), shown, reason, outage_s))
    storage.record_heartbeat = _skipped_on_failure(type(storage).record_heartbeat.__get__(storage))
    return storage
