"""Load Chrome traces written by ``torch.profiler`` (Kineto) into numpy columns.

A trace of hundreds of MB holds millions of events; building a dict per event and keeping them
all (what ``json.load`` does) costs gigabytes. We decode the ``traceEvents`` array one element at
a time with the C scanner of the ``json`` module, keep only the complete events (``ph == "X"``)
of the categories the classifier uses, and append their fields to typed arrays. Names are
interned: each event holds an integer id into :attr:`RankTrace.names`.

Times become int64 nanoseconds (Kineto writes microseconds with three decimals), so that interval
arithmetic downstream is exact.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autotune.errors import TraceFormatError
from autotune.profiling.kinds import CATEGORY_TABLE, Category, first_match

TRACE_SUFFIXES = (".json", ".json.gz")
RUN_ID_KEY = "autotune_run_id"

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
    names: list[str]
    host: EventTable
    device: EventTable


class _Columns:
    """Typed append-only columns, filled by the streaming parser."""

    def __init__(self) -> None:
        self.ts, self.dur = array("d"), array("d")
        self.name, self.tid, self.corr, self.cat = array("q"), array("q"), array("q"), array("b")
        self.names: dict[str, int] = {}
        self.cats: dict[Any, int] = {}
        self.tids: dict[Any, int] = {}

    def add(self, ev: dict) -> None:
        if ev.get("ph") != "X":
            return
        cat = ev.get("cat")
        code = self.cats.get(cat)
        if code is None:
            code = self.cats[cat] = first_match(CATEGORY_TABLE, str(cat))
        if code == Category.IGNORED:
            return
        name = ev.get("name", "")
        nid = self.names.get(name)
        if nid is None:
            nid = self.names[name] = len(self.names)
        tid = ev.get("tid", 0)
        if not isinstance(tid, int):
            tid = self.tids.setdefault(tid, -1 - len(self.tids))
        args = ev.get("args")
        corr = args.get("correlation", -1) if args else -1
        self.ts.append(ev["ts"])
        self.dur.append(ev.get("dur", 0.0))
        self.name.append(nid)
        self.tid.append(tid)
        self.corr.append(corr if isinstance(corr, int) else -1)
        self.cat.append(code)

    def tables(self) -> tuple[EventTable, EventTable]:
        ts = np.frombuffer(self.ts, dtype=np.float64)
        start = np.rint(ts * 1000.0).astype(np.int64)
        end = start + np.rint(np.frombuffer(self.dur, dtype=np.float64) * 1000.0).astype(np.int64)
        table = EventTable(
            start,
            end,
            np.frombuffer(self.name, dtype=np.int64),
            np.frombuffer(self.tid, dtype=np.int64),
            np.frombuffer(self.corr, dtype=np.int64),
            np.frombuffer(self.cat, dtype=np.int8),
        )
        on_device = table.category == Category.DEVICE
        return table.take(~on_device), table.take(on_device)


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
        return raw.decode("utf-8")
    except FileNotFoundError:
        raise TraceFormatError(f"{path}: no such file") from None
    except (EOFError, OSError, zlib.error) as exc:
        raise TraceFormatError(f"{path}: cannot read the gzip stream ({exc})") from None
    except UnicodeDecodeError as exc:
        raise TraceFormatError(
            f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None


def _parse(text: str, path: Path) -> tuple[dict, _Columns]:
    """Parse the top-level object; events go to columns, every other key into ``meta``."""
    scan = json.JSONDecoder().scan_once
    cols = _Columns()
    meta: dict[str, Any] = {}
    seen_events = False

    def fail(pos: int, what: str) -> TraceFormatError:
        where = "end of file" if pos >= len(text) else f"character {pos}"
        return TraceFormatError(
            f"{path}: not a complete JSON trace ({what} at {where}; truncated or corrupt?)"
        )

    def value(pos: int) -> tuple[Any, int]:
        try:
            return scan(text, pos)
        except StopIteration:
            raise fail(pos, "expected a JSON value") from None
        except json.JSONDecodeError as exc:
            raise fail(exc.pos, exc.msg) from None

    def expect(pos: int, chars: str) -> tuple[str, int]:
        pos = _WS.match(text, pos).end()
        if pos >= len(text) or text[pos] not in chars:
            raise fail(pos, f"expected one of {chars!r}")
        return text[pos], pos + 1

    _, pos = expect(0, "{")
    pos = _WS.match(text, pos).end()
    while not text.startswith("}", pos):
        key, pos = value(pos)
        _, pos = expect(pos, ":")
        pos = _WS.match(text, pos).end()
        if key == "traceEvents" and text.startswith("[", pos):
            seen_events = True
            pos = _parse_events(text, pos + 1, value, expect, cols, path)
        else:
            meta[key], pos = value(pos)
        sep, pos = expect(pos, ",}")
        if sep == "}":
            break
        pos = _WS.match(text, pos).end()
    if not seen_events:
        raise TraceFormatError(f"{path}: no 'traceEvents' list; is this a torch.profiler trace?")
    return meta, cols


def _parse_events(text, pos, value, expect, cols: _Columns, path: Path) -> int:
    pos = _WS.match(text, pos).end()
    if text.startswith("]", pos):
        return pos + 1
    add = cols.add
    ws = _WS.match
    while True:
        ev, pos = value(ws(text, pos).end())
        if type(ev) is dict:
            try:
                add(ev)
            except (KeyError, TypeError, ValueError) as exc:
                raise TraceFormatError(
                    f"{path}: malformed event near character {pos} ({type(exc).__name__}: {exc})"
                ) from None
        sep, pos = expect(pos, ",]")
        if sep == "]":
            return pos


def _rank_and_world(meta: dict, path: Path) -> tuple[int, int | None]:
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        ws = info.get("world_size")
        return info["rank"], ws if isinstance(ws, int) else None
    match = _RANK_IN_NAME.search(path.name)
    return (int(match.group(1)) if match else 0), None


def load_trace(path: str | Path) -> RankTrace:
    """Read one trace file (``.json`` or ``.json.gz``) into columns."""
    path = Path(path)
    meta, cols = _parse(_read_text(path), path)
    host, device = cols.tables()
    rank, world_size = _rank_and_world(meta, path)
    run_id = meta.get(RUN_ID_KEY)
    return RankTrace(
        path=path,
        rank=rank,
        world_size=world_size,
        run_id=str(run_id) if run_id is not None else None,
        names=list(cols.names),
        host=host,
        device=device,
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
