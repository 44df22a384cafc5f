"""Where a run's wall time goes: process start, model build, compile, capture, loader, steps, profile.

The run's processes write begin/end events of named parts to a file as they go (one JSON object a
line, ``time.monotonic()`` seconds, which every process of a Linux host shares); the launcher
writes the first event itself (``start`` begins just before it starts the processes) and reads the
file when the run has ended, however it ended: a run killed in the middle of its compile still says
that its minutes went to compiling. :func:`cost_of` turns the events into a
:class:`~autotune.train.trial.record.Cost` whose parts are *exclusive* (time in a part nested in another,
such as a compile inside a warm-up step, counts once, for the inner part) and add up to the wall time
with ``other``, the time no part claimed.

In the worker::

    cost.install(path)                # events go to path from now on; compile events too
    with cost.part("build"): ...      # nothing happens without install (library calls, tests)
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune.train.trial.record import Cost

PARTS = (
    "start",
    "build",
    "loader",
    "compile",
    "capture",
    "warmup",
    "measure",
    "profile",
    "remeasure",
    "other",
)
"""Every part a cost may have, in the order of a run (``remeasure``: a second run of a noisy trial)."""

PART_DOCS = {
    "start": "from the launch to the worker's first line of work: interpreter, torch and autotune imports (torchrun too)",
    "build": "process group, the model built on the device with every knob applied, the optimizer",
    "loader": "the loader made and its first batches waited for (workers starting, the prefetch queue filling)",
    "compile": "torch.compile: Dynamo tracing, AOTAutograd and Inductor, the lazy backward compile included",
    "capture": "CUDA-graph capture of regions or of the whole step",
    "warmup": "the warm-up steps themselves, less the compile, capture and loader time inside them",
    "measure": "the measured steps",
    "profile": "the profiled window after them, its trace written and classified",
    "remeasure": "a second run of the same configuration (a noisy trial measured again)",
    "other": "what no part claims: the matmul-rate probe, the record written, process exit, the tuner's own work",
}


class CostLog:
    """Appends part events to a file; thread-safe (the lazy backward compile may run on autograd's thread)."""

    def __init__(self, path: str | Path) -> None:
        self._file = open(path, "a", buffering=1)  # noqa: SIM115  closed with the process
        self._lock = threading.Lock()

    def event(self, kind: str, part: str, **extra: Any) -> None:
        line = json.dumps({"t": time.monotonic(), "ev": kind, "part": part, **extra})
        with self._lock:
            self._file.write(line + "\n")


_log: CostLog | None = None


def install(path: str | Path | None) -> None:
    """Send this process's part events to ``path`` (None: none), compile events included."""
    global _log
    _log = CostLog(path) if path else None
    if _log is not None:
        _watch_compiles()


def event(kind: str, part: str, **extra: Any) -> None:
    if _log is not None:
        _log.event(kind, part, **extra)


@contextlib.contextmanager
def part(name: str) -> Iterator[None]:
    """Time the block as part ``name`` (a no-op unless :func:`install` was called)."""
    assert name in PARTS, name
    event("begin", name)
    try:
        yield
    finally:
        event("end", name)


def write_counters() -> None:
    """Record the compile caches' hit and miss counts of this process so far (the last record counts)."""
    if _log is not None:
        from autotune.train.compile_cache import cache_counters

        _log.event("counters", "compile", counters=cache_counters())


def _watch_compiles() -> None:
    """Dynamo's compile callbacks as ``compile`` events: they cover tracing, AOTAutograd and Inductor,
    and the lazy backward compile, counted once where compiles nest (torch 2.11 and 2.13)."""
    try:
        from torch._dynamo.callback import callback_handler
    except ImportError:  # without them the compile time stays inside the warm-up
        return
    callback_handler.register_start_callback(lambda *_: event("begin", "compile"))
    callback_handler.register_end_callback(lambda *_: event("end", "compile"))


# ---------------------------------------------------------------- the launcher's side


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """The events of ``path`` (a line still being written when the run was killed is left out)."""
    p = Path(path)
    if not p.exists():
        return []
    events = []
    for line in p.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def cost_of(
    events: list[dict[str, Any]], begin: float, end: float, extra: dict[str, float] | None = None
) -> Cost:
    """The run's cost from ``begin`` to ``end`` (monotonic seconds): each instant goes to the innermost
    part open then, a part still open at the end (the run was killed) is closed there, and what no
    part holds is ``other``. ``extra``: parts timed outside the events (a re-measure), added as they are."""
    totals = dict.fromkeys(PARTS, 0.0)
    stack: list[str] = []
    last = begin
    counters: dict[str, int] = {}
    for ev in sorted((e for e in events if "t" in e), key=lambda e: e["t"]):
        if ev.get("ev") == "counters":
            counters = {k: int(v) for k, v in (ev.get("counters") or {}).items()}
            continue
        t = min(max(float(ev["t"]), begin), end)
        totals[stack[-1] if stack else "other"] += t - last
        last = t
        name = ev.get("part")
        if name not in totals:
            continue
        if ev.get("ev") == "begin":
            stack.append(name)
        elif ev.get("ev") == "end" and name in stack:
            # close the innermost part of that name (and any left open inside it)
            while stack and stack.pop() != name:
                pass
    totals[stack[-1] if stack else "other"] += end - last
    for name, seconds in (extra or {}).items():
        totals[name] += seconds
    wall = end - begin + sum((extra or {}).values())
    return Cost(
        wall_s=wall,
        parts={k: v for k, v in totals.items() if v > 0 or k == "other"},
        compile_cache=counters,
    )


def with_wall(run: Cost | None, wall_s: float, remeasure: Cost | None = None) -> Cost:
    """The cost of a whole trial that took ``wall_s``: its run's parts, a second run as ``remeasure``,
    and the rest (the tuner sampling, probing the host, storing) in ``other``."""
    parts = dict(run.parts) if run is not None else {}
    if remeasure is not None:
        parts["remeasure"] = parts.get("remeasure", 0.0) + remeasure.wall_s
    parts.setdefault("other", 0.0)
    rest = wall_s - sum(parts.values())
    parts["other"] += max(0.0, rest)
    return Cost(
        wall_s=sum(parts.values()),
        parts=parts,
        compile_cache=dict(run.compile_cache) if run else {},
    )
