"""Decisions every rank of a job takes at the same step: stop (a SIGTERM, a SIGHUP or a first
Ctrl-C on any rank), profile, and whether a step every rank takes together (choosing the checkpoint
to resume from) succeeded everywhere (:meth:`Control.agree`).

With several ranks the flags go through a gloo group on the CPU (no device synchronisation): each
step boundary starts an all-reduce (max) of this rank's flags and reads the one started at the
boundary before, so every rank acts on the same reduced flags at the same step, one step after
they were raised. With one rank the flags act at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from autotune.errors import TrialError
from autotune.hangup import output_may_be_gone, stop_requests

STOP, PROFILE = 0, 1
T = TypeVar("T")


class FailedElsewhere(TrialError):
    """Another rank failed at a step every rank takes together (:meth:`Control.agree`): that rank
    says why; this one ends without a word of its own."""

    def __init__(self, rank: int, reason: str, message: str) -> None:
        super().__init__(f"rank {rank}: {message}", reason)


class Control:
    def __init__(self, world_size: int) -> None:
        self.world = world_size
        self.group = dist.new_group(backend="gloo") if world_size > 1 else None
        self._work = None
        self._buf: torch.Tensor | None = None
        self.terminated = False
        """Set by SIGTERM (what a scheduler sends before it preempts), SIGHUP (the terminal or the
        ssh session is gone) or a first Ctrl-C."""
        self.stopped_by: str | None = None
        """The first of those signals: ``SIGTERM``, ``SIGHUP`` or ``SIGINT``."""
        self._previous: dict[int, Any] = {}

    # -- SIGTERM, SIGHUP and Ctrl-C ---------------------------------------------------------------
    def catch_signals(self) -> None:
        """Record SIGTERM, SIGHUP and a first Ctrl-C instead of dying (main thread only): the job
        stops at the step boundary and saves it. A second Ctrl-C interrupts at once. A SIGINT
        ignored already (a job started in the background) stays ignored, and so does a SIGHUP
        (``nohup``). Loader workers forked after this inherit the handler, so a signal sent to the
        whole process group does not kill them."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in stop_requests():
            self._previous[signum] = signal.signal(signum, self._on_signal)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        output_may_be_gone()  # the job's last lines must not fail where a hang-up left no reader
        self.terminated = True
        self.stopped_by = self.stopped_by or signal.Signals(signum).name
        if signum == signal.SIGINT:  # the next Ctrl-C raises KeyboardInterrupt
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def release(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    # -- agreement --------------------------------------------------------------------------------
    def exchange(self, profile: bool = False) -> tuple[bool, bool]:
        """(stop, profile) as every rank sees them at this boundary."""
        flags = [int(self.terminated), int(profile)]
        if self.group is None:
            return bool(flags[STOP]), bool(flags[PROFILE])
        agreed = (False, False)
        if self._work is not None:
            self._work.wait()
            agreed = (bool(self._buf[STOP]), bool(self._buf[PROFILE]))
        self._buf = torch.tensor(flags, dtype=torch.int32)
        self._work = dist.all_reduce(
            self._buf, op=dist.ReduceOp.MAX, group=self.group, async_op=True
        )
        return agreed

    def drain(self) -> None:
        """Wait for the all-reduce in flight (every rank started as many)."""
        if self._work is not None:
            with contextlib.suppress(Exception):
                self._work.wait()
            self._work = None

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank."""
        if self.group is None:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order, on every rank."""
        if self.group is None:
            return [value]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, value, group=self.group)
        return out

    def agree(self, work: Callable[[], T] | None) -> T | None:
        """``work()`` on this rank (None: nothing to do here), returned once every rank's has
        succeeded. Where one failed, every rank raises at once: those that failed their own error,
        the others :class:`FailedElsewhere` naming the first of them. (A rank that raised alone
        would leave the others waiting at their next collective, to end on a broken connection.)"""
        try:
            value = work() if work is not None else None
        except Exception as exc:
            with contextlib.suppress(Exception):  # its own error is what this rank has to tell
                self._first_failure(exc)
            raise
        failed = self._first_failure(None)
        if failed is not None:
            raise FailedElsewhere(*failed)
        return value

    def _first_failure(self, exc: Exception | None) -> tuple[int, str, str] | None:
        """(rank, reason, message) of the first rank whose work failed, once every rank has told
        whether its own did (``exc``)."""
        if self.group is None:
            return None
        mine = None
        if exc is not None:  # the job's worker has it loaded; a job of one rank never gets here
            from autotune.train.trial.worker import classify_exception

            mine = classify_exception(exc)
        told = self.gather(mine)
        return next(((rank, *f) for rank, f in enumerate(told) if f is not None), None)

    def barrier(self) -> None:
        if self.group is not None:
            dist.barrier(group=self.group)
