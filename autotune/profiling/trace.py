"""Load Chrome traces written by ``torch.profiler`` (Kineto) into numpy columns.

A trace of hundreds of MB holds millions of events; building a dict per event and keeping them
all (what ``json.load`` does) costs gigabytes. We read the text in chunks of 8 M characters,
decode the ``traceEvents`` array one element at a time with the C scanner of the ``json``
module, keep only the complete events (``ph == "X"``) of the categories the classifier uses,
and append their fields to typed arrays. Peak memory is a chunk plus the columns, whatever the
file's size. Names are interned: each event holds an integer id into :attr:`RankTrace.names`.

Times become int64 nanoseconds (Kineto writes microseconds with three decimals), so that interval
arithmetic downstream is exact. A complete event with a negative (or no finite) duration is
refused, naming the event: its interval would be nonsense in every sum.

Kineto's 2021 format is read too: its categories (``Operator``, ``Runtime``, ``Kernel``,
``Memcpy``, ``Memset``) map to today's, and its ``Operator`` events are split into operators and
``record_function`` spans by name (:data:`kinds.LEGACY_ANNOTATION`). Events of categories that
are not classified but say what was traced (a GPU's own markers, another accelerator's
activity) are counted per category in :attr:`RankTrace.side_categories`.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autotune.boundedread import check_regular
from autotune.errors import TraceFormatError, short_repr
from autotune.profiling.kinds import CATEGORY_TABLE, LEGACY_ANNOTATION, Category, first_match

TRACE_SUFFIXES = (".json", ".json.gz")
RUN_ID_KEY = "autotune_run_id"
DETAIL_KEY = "autotune_profile_detail"

_WS = re.compile(r"[ \t\n\r]*")
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)")


@dataclass
class EventTable:
    """Columns of one kind of event (host or device), in file order."""

    start: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns
    name: np.ndarray  # int64 id into RankTrace.names
    tid: np.ndarray  # int64 thread id (host) or stream (device)
    corr: np.ndarray  # int64 correlation id of a launch and its device work, -1 if none
    category: np.ndarray  # int8 Category

    def __len__(self) -> int:
        return len(self.start)

    def take(self, mask_or_index: np.ndarray) -> EventTable:
        return EventTable(
            *(getattr(self, f)[mask_or_index] for f in EventTable.__dataclass_fields__)
        )


@dataclass
class RankTrace:
    """The events of one rank's trace file and what the file says about its run."""

    path: Path
    rank: int
    world_size: int | None
    run_id: str | None
    detail: str | None
    """What ``profile_window`` recorded (``"ops"`` or ``"spans"``); None for other traces."""
    names: list[str]
    host: EventTable
    device: EventTable
    side_categories: dict[str, int] = field(default_factory=dict)
    """Events per category that are not classified but say what was traced: a GPU's own markers
    (``gpu_user_annotation``, ``ac2g`` flows) or another accelerator's (``mtia_runtime``, ...)."""
    device_properties: int = 0
    """Devices the trace's ``deviceProperties`` lists (GPUs the profiler saw on the machine)."""
    backend: str | None = None
    """``distributedInfo.backend`` (``"nccl"``, ``"gloo"``, ``"mtia:hccl,cpu:gloo"``), if any."""


class _BadField(TypeError):
    """A field of an event that no reader of the columns could use (its message names it)."""


class _Columns:
    """Typed append-only columns, filled by the streaming parser."""

    def __init__(self) -> None:
        self.ts, self.dur = array("d"), array("d")
        self.name, self.tid, self.corr, self.cat = array("q"), array("q"), array("q"), array("b")
        self.names: dict[str, int] = {}
        self.cats: dict[Any, int] = {}
        self.tids: dict[Any, int] = {}
        self.side: dict[str, int] = {}

    def add(self, ev: dict) -> None:
        cat = ev.get("cat")
        try:
            code = self.cats.get(cat)
        except TypeError:  # unhashable: a list or an object
            raise _BadField(f"'cat' is {short_repr(cat)}; allowed: a string") from None
        if code is None:  # a plain int: hashing an IntEnum member calls Python code, per event
            code = self.cats[cat] = int(first_match(CATEGORY_TABLE, str(cat)))
        if code in _NOT_READ:
            if code != Category.IGNORED:
                self.side[cat] = self.side.get(cat, 0) + 1
            return
        if ev.get("ph") != "X":
            return
        name = ev.get("name", "")
        nid = self.names.get(name)
        if nid is None:
            if not isinstance(name, str):  # every name is matched against the kind tables
                raise _BadField(f"'name' is {short_repr(name)}; allowed: a string")
            nid = self.names[name] = len(self.names)
        tid = ev.get("tid", 0)
        if not isinstance(tid, int):
            tid = self.tids.setdefault(tid, -1 - len(self.tids))
        args = ev.get("args")
        if args and type(args) is not dict:
            raise _BadField(f"'args' is {short_repr(args)}; allowed: an object")
        corr = args.get("correlation", -1) if args else -1
        self.ts.append(ev["ts"])
        dur = ev.get("dur")
        if dur is None:  # a step without one would count as a step of no time
            raise _BadField("'dur' is missing; a complete event (ph X) has one")
        self.dur.append(dur)
        self.name.append(nid)
        self.tid.append(tid)
        self.corr.append(corr if isinstance(corr, int) else -1)
        self.cat.append(code)

    def tables(self, path: Path) -> tuple[EventTable, EventTable]:
        ts = np.frombuffer(self.ts, dtype=np.float64)
        dur = np.frombuffer(self.dur, dtype=np.float64)
        self._check_times(path, ts, dur)
        start = np.rint(ts * 1000.0).astype(np.int64)
        end = start + np.rint(dur * 1000.0).astype(np.int64)
        table = EventTable(
            start,
            end,
            np.frombuffer(self.name, dtype=np.int64),
            np.frombuffer(self.tid, dtype=np.int64),
            np.frombuffer(self.corr, dtype=np.int64),
            self._categories(),
        )
        on_device = table.category == Category.DEVICE
        return table.take(~on_device), table.take(on_device)

    def _categories(self) -> np.ndarray:
        """Each event's category, 2021-format ``Operator`` events split by name."""
        cat = np.array(self.cat, dtype=np.int8)
        legacy = np.flatnonzero(cat == Category.LEGACY_OP)
        if len(legacy):
            span = np.fromiter((bool(LEGACY_ANNOTATION.search(n)) for n in self.names), bool)
            name = np.frombuffer(self.name, dtype=np.int64)[legacy]
            cat[legacy] = np.where(span[name], Category.ANNOTATION, Category.HOST_OP)
        return cat

    def _check_times(self, path: Path, ts: np.ndarray, dur: np.ndarray) -> None:
        bad = np.flatnonzero(~(dur >= 0) | ~(np.abs(ts) < MAX_US) | ~(dur < MAX_US))
        if len(bad) == 0:
            return
        i = int(bad[0])
        name = list(self.names)[self.name[i]]
        if not np.isfinite(ts[i]):
            what = f"no finite timestamp ({ts[i]})"
        elif not np.isfinite(dur[i]):
            what = f"no finite duration ({dur[i]})"
        elif not dur[i] >= 0:
            what = f"a negative duration ({dur[i]} us)"
        else:
            what = f"a time past {MAX_US:.0e} us (ts {ts[i]}, dur {dur[i]})"
        raise TraceFormatError(
            f"{path}: event {name!r} at ts {ts[i]} has {what}; a complete event needs a time and a dur >= 0"
            + (f" ({len(bad)} such events)" if len(bad) > 1 else "")
        )


MAX_US = 2.0**62 / 1000
"""Microseconds a timestamp or a duration may reach: start and end in int64 nanoseconds (a
clock of 146 years; Kineto's timestamps are microseconds since the epoch, about 1.7e15)."""


# Categories whose events are not kept as columns (some are counted, see Columns.side).
_NOT_READ = frozenset(int(c) for c in (Category.IGNORED, Category.GPU_SIDE, Category.ACCELERATOR))


class _Reader:
    """The decoded text of a trace, read in chunks so that a large file is never held whole."""

    CHUNK = 1 << 23  # characters
    MAX_VALUE = 1 << 26
    """Characters one top-level value or event may span: Kineto's largest (``deviceProperties``) are
    kilobytes. A value still incomplete past this is a corrupt file, refused without reading the
    rest of it (a file cut short and padded with gigabytes of zeros)."""

    def __init__(self, fh, path: Path) -> None:
        self.fh, self.path = fh, path
        self.buf, self.pos, self.base, self.eof = "", 0, 0, False
        self.scan = json.JSONDecoder().scan_once

    def _read(self) -> str:
        try:
            return self.fh.read(self.CHUNK)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceFormatError(f"{self.path}: cannot read the gzip stream ({exc})") from None
        except UnicodeDecodeError as exc:
            raise TraceFormatError(f"{self.path}: not UTF-8 text ({exc.reason})") from None

    def more(self) -> bool:
        """Append the next chunk, dropping what was consumed; False at the end of the file."""
        chunk = "" if self.eof else self._read()
        if not chunk:
            self.eof = True
            return False
        if "\x00" in chunk:  # never in JSON text (a string escapes it): a file padded with zeros
            at = self.base + len(self.buf) + chunk.index("\x00")
            raise TraceFormatError(
                f"{self.path}: not a complete JSON trace (a NUL byte at character {at}; truncated or corrupt?)"
            )
        self.base += self.pos
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0
        return True

    def fail(self, what: str, pos: int | None = None) -> TraceFormatError:
        pos = self.pos if pos is None else pos
        where = (
            "end of file" if self.eof and pos >= len(self.buf) else f"character {self.base + pos}"
        )
        return TraceFormatError(
            f"{self.path}: not a complete JSON trace ({what} at {where}; truncated or corrupt?)"
        )

    def peek(self) -> str:
        """The next non-blank character ("" at the end of the file), not consumed."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or not self.more():
                return self.buf[self.pos : self.pos + 1]

    def char(self, allowed: str) -> str:
        c = self.peek()
        if not c or c not in allowed:
            raise self.fail(f"expected one of {allowed!r}")
        self.pos += 1
        return c

    def value(self) -> Any:
        self.peek()
        while True:
            try:
                v, end = self.scan(self.buf, self.pos)
                # A value that reaches the end of the chunk may go on in the next (a number).
                if end < len(self.buf) or self.eof or not self.more():
                    self.pos = end
                    return v
                continue
            except StopIteration:
                error = (self.pos, "expected a JSON value")
            except json.JSONDecodeError as exc:
                error = (exc.pos, exc.msg)
            # nested past the stack (RecursionError); a number of more digits than int() takes
            except (RecursionError, ValueError) as exc:
                raise self.fail(f"an unreadable value ({type(exc).__name__}: {exc})") from None
            if len(self.buf) - self.pos > self.MAX_VALUE or not self.more():
                raise self.fail(error[1], error[0])


def _open_text(path: Path):
    try:
        check_regular(path, TraceFormatError)  # a link to /dev/zero is not a trace
        # utf-8-sig: a byte-order mark ahead of the JSON (an editor's save) is read past
        if path.name.endswith(".gz"):
            return gzip.open(path, "rt", encoding="utf-8-sig")
        return open(path, encoding="utf-8-sig")  # noqa: SIM115 (closed by the caller)
    except FileNotFoundError:
        raise TraceFormatError(f"{path}: no such file") from None
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot open ({exc})") from None


def _parse(path: Path) -> tuple[dict, _Columns]:
    """Parse the top-level object; events go to columns, every other key into ``meta``."""
    cols = _Columns()
    meta: dict[str, Any] = {}
    seen_events = False
    with _open_text(path) as fh:
        r = _Reader(fh, path)
        r.char("{")
        while r.peek() != "}":
            key = r.value()
            r.char(":")
            if key == "traceEvents" and r.peek() == "[":
                r.pos += 1
                seen_events = True
                _parse_events(r, cols)
            else:
                meta[key] = r.value()
            if r.char(",}") == "}":
                break
    if not seen_events:
        raise TraceFormatError(f"{path}: no 'traceEvents' list; is this a torch.profiler trace?")
    return meta, cols


def _parse_events(r: _Reader, cols: _Columns) -> None:
    if r.peek() == "]":
        r.pos += 1
        return
    add = cols.add
    while True:
        ev = r.value()
        if type(ev) is dict:
            try:
                add(ev)
            # a field of another type (a string ts, args a list) or a number out of a column's
            # range (a ts of 1e400 for float64, a tid past int64)
            except (KeyError, TypeError, ValueError, OverflowError) as exc:
                raise TraceFormatError(
                    f"{r.path}: malformed event near character {r.base + r.pos} ({_fault(ev, exc)})"
                ) from None
        if r.char(",]") == "]":
            return


def _fault(ev: dict, exc: Exception) -> str:
    """The field of ``ev`` that :meth:`_Columns.add` could not take, named (found again here, off
    the per-event path, so that reading a good trace pays nothing for it)."""
    if isinstance(exc, _BadField):
        return str(exc)
    if "ts" not in ev:
        return "no 'ts'"
    args = ev.get("args")
    numbers = {"ts": ev["ts"], "dur": ev.get("dur", 0.0)}
    integers = {"tid": ev.get("tid", 0)}
    if type(args) is dict:
        integers["args.correlation"] = args.get("correlation", -1)
    for key, value in numbers.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"'{key}' is {short_repr(value)}; allowed: a number of microseconds"
        if isinstance(value, int) and not abs(value) < MAX_US:
            return f"'{key}' is {short_repr(value)}; allowed: a number of microseconds below {MAX_US:.0e}"
    for key, value in integers.items():
        if isinstance(value, int) and not -(2**63) <= value < 2**63:
            return f"'{key}' is {short_repr(value)}; allowed: a 64-bit integer"
    return f"{type(exc).__name__}: {exc}"


def _rank_and_world(meta: dict, path: Path) -> tuple[int, int | None]:
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        ws = info.get("world_size")
        return info["rank"], ws if isinstance(ws, int) else None
    match = _RANK_IN_NAME.search(path.name)
    return (int(match.group(1)) if match else 0), None


def _backend(meta: dict) -> str | None:
    info = meta.get("distributedInfo")
    backend = info.get("backend") if isinstance(info, dict) else None
    return backend if isinstance(backend, str) else None


def load_trace(path: str | Path) -> RankTrace:
    """Read one trace file (``.json`` or ``.json.gz``) into columns."""
    path = Path(path)
    meta, cols = _parse(path)
    host, device = cols.tables(path)
    rank, world_size = _rank_and_world(meta, path)
    devices = meta.get("deviceProperties")
    run_id = meta.get(RUN_ID_KEY)
    return RankTrace(
        path=path,
        rank=rank,
        world_size=world_size,
        run_id=str(run_id) if run_id is not None else None,
        detail=meta.get(DETAIL_KEY) if isinstance(meta.get(DETAIL_KEY), str) else None,
        names=list(cols.names),
        host=host,
        device=device,
        side_categories=dict(cols.side),
        device_properties=len(devices) if isinstance(devices, list) else 0,
        backend=_backend(meta),
    )


def trace_files(path: str | Path) -> list[Path]:
    """The trace files at ``path``: the file itself, or the traces directly inside a folder."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
        if not files:
            raise TraceFormatError(f"{path}: no trace files (*.json, *.json.gz) in this folder")
        return files
    if not path.exists():
        raise TraceFormatError(f"{path}: no such file or folder")
    if not path.name.endswith(TRACE_SUFFIXES):
        raise TraceFormatError(f"{path}: not a trace file (expected *.json or *.json.gz)")
    return [path]


def check_one_run(traces: list[RankTrace]) -> None:
    """Traces of one folder must come from one run: same run id and world size, unique ranks."""
    first = traces[0]
    by_rank: dict[int, RankTrace] = {}
    for t in traces:
        if t.run_id != first.run_id:
            raise TraceFormatError(
                f"{t.path}: run id {t.run_id!r} differs from {first.run_id!r} of {first.path.name};"
                " the folder holds traces of two runs"
            )
        if t.world_size != first.world_size:
            raise TraceFormatError(
                f"{t.path}: world size {t.world_size} differs from {first.world_size} of "
                f"{first.path.name}; the folder holds traces of two runs"
            )
        if t.rank in by_rank:
            raise TraceFormatError(
                f"{t.path}: rank {t.rank} also in {by_rank[t.rank].path.name};"
                " the folder holds traces of two runs (or ranks are missing from distributedInfo)"
            )
        if t.world_size is not None and not 0 <= t.rank < t.world_size:
            raise TraceFormatError(f"{t.path}: rank {t.rank} outside world size {t.world_size}")
        by_rank[t.rank] = t


def load_traces(path: str | Path) -> list[RankTrace]:
    """All rank traces at ``path`` (a file or a folder), checked to be one run, sorted by rank."""
    traces = [load_trace(p) for p in trace_files(path)]
    check_one_run(traces)
    return sorted(traces, key=lambda t: t.rank)
