"""Build Kineto-shaped Chrome traces by hand: test fixtures and benchmark inputs.

Events carry the fields ``torch.profiler`` writes (``ph``, ``cat``, ``name``, ``pid``, ``tid``,
``ts``, ``dur``, ``args.correlation``, ``args.stream``, ``ac2g`` flow events), so the same
file can be read by our loader and by HTA. Times are microseconds relative to ``t0_us``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from autotune.profiling.trace import RUN_ID_KEY

DEFAULT_T0_US = 1_700_000_000_000.0


class TraceBuilder:
    """Accumulates the events of one rank; :meth:`write` saves them as a trace file."""

    def __init__(
        self,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        run_id: str | None = None,
        pid: int = 4242,
        tid: int = 4242,
        device: int = 0,
        t0_us: float = DEFAULT_T0_US,
    ) -> None:
        self.pid, self.tid, self.device, self.t0 = pid, tid, device, t0_us
        self.meta: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": []}
        if rank is not None:
            self.meta["distributedInfo"] = {
                "backend": "nccl",
                "rank": rank,
                "world_size": world_size if world_size is not None else rank + 1,
            }
        if run_id is not None:
            self.meta[RUN_ID_KEY] = run_id
        self.events: list[dict[str, Any]] = []
        self._corr = 0

    def _x(self, cat: str, name: str, ts: float, dur: float, pid, tid, args=None) -> dict:
        ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid}
        ev["ts"], ev["dur"] = round(self.t0 + ts, 3), round(dur, 3)
        if args:
            ev["args"] = args
        self.events.append(ev)
        return ev

    def step(self, number: int, ts: float, dur: float, tid: int | None = None) -> None:
        self._x("user_annotation", f"ProfilerStep#{number}", ts, dur, self.pid, tid or self.tid)

    def annotation(self, name: str, ts: float, dur: float, tid: int | None = None) -> None:
        self._x("user_annotation", name, ts, dur, self.pid, tid or self.tid)

    def op(self, name: str, ts: float, dur: float, tid: int | None = None) -> None:
        self._x(
            "cpu_op", name, ts, dur, self.pid, tid or self.tid, {"External id": len(self.events)}
        )

    def runtime(self, name: str, ts: float, dur: float, tid: int | None = None) -> int:
        """A runtime call on the host; returns its correlation id."""
        self._corr += 1
        self._x(
            "cuda_runtime",
            name,
            ts,
            dur,
            self.pid,
            tid or self.tid,
            {"cbid": 211, "correlation": self._corr},
        )
        return self._corr

    def device_event(
        self,
        name: str,
        ts: float,
        dur: float,
        corr: int | None,
        *,
        stream: int = 7,
        cat: str = "kernel",
    ) -> None:
        """A kernel (memcpy, memset) on ``stream``; ``corr=None`` writes no correlation id."""
        args: dict[str, Any] = {"device": self.device, "stream": stream}
        if corr is not None:
            args.update({"correlation": corr, "External id": corr})
        self._x(cat, name, ts, dur, self.device, stream, args)

    def flow(self, corr: int, host_ts: float, device_ts: float, stream: int = 7) -> None:
        base = {"cat": "ac2g", "name": "ac2g", "id": corr}
        self.events.append(
            {"ph": "s", **base, "pid": self.pid, "tid": self.tid, "ts": self.t0 + host_ts}
        )
        self.events.append(
            {
                "ph": "f",
                **base,
                "pid": self.device,
                "tid": stream,
                "ts": self.t0 + device_ts,
                "bp": "e",
            }
        )

    def launch(
        self,
        kernel: str,
        host_ts: float,
        host_dur: float,
        ts: float,
        dur: float,
        *,
        stream: int = 7,
        api: str = "cudaLaunchKernel",
        cat: str = "kernel",
        tid: int | None = None,
    ) -> int:
        """A runtime call and the device event it launched, linked by correlation id and flow."""
        corr = self.runtime(api, host_ts, host_dur, tid)
        self.device_event(kernel, ts, dur, corr, stream=stream, cat=cat)
        self.flow(corr, host_ts, ts, stream)
        return corr

    def graph_launch(
        self,
        host_ts: float,
        host_dur: float,
        kernels: list[tuple[str, float, float, int]],
        correlation: str = "launch",
    ) -> int:
        """``cudaGraphLaunch`` and the kernels of the replayed graph: (name, ts, dur, stream).

        ``correlation`` is what the kernels carry, in the shapes real traces show: ``launch``
        (the launch's id, CUPTI's normal case), ``none`` (no id), ``zero`` (id 0), ``foreign``
        (ids that match no call: how the wrong ids of CUPTI 13.0 in a process's later profiling
        sessions look to the classifier) or ``first`` (the first kernel of each stream has the
        launch's id, the others none).
        """
        corr = self.runtime("cudaGraphLaunch", host_ts, host_dur)
        streams_seen: set[int] = set()
        for name, ts, dur, stream in kernels:
            ids = {
                "launch": corr,
                "none": None,
                "zero": 0,
                "foreign": 1_000_000 + corr,
                "first": corr if stream not in streams_seen else None,
            }
            self.device_event(name, ts, dur, ids[correlation], stream=stream)
            streams_seen.add(stream)
        return corr

    def to_dict(self) -> dict[str, Any]:
        return {**self.meta, "traceEvents": self.events, "displayTimeUnit": "ms"}

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.to_dict(), indent=1)
        if path.name.endswith(".gz"):
            # mtime=0: the same events give the same bytes, so fixtures do not churn.
            path.write_bytes(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0))
        else:
            path.write_text(text, encoding="utf-8")
        return path
