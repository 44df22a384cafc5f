"""Build traces in Kineto's 2021 format (torch 1.8-1.9), for fixtures of the older categories.

What differs from today's format, as the traces of that time (kineto's ResNet-50 samples) show:
operators and ``record_function`` spans alike are ``"cat": "Operator"``, runtime calls
``"Runtime"``, device work ``"Kernel"`` / ``"Memcpy"`` / ``"Memset"``; host thread ids are
strings (``"tid": "4242"``) and device rows ``"stream 7"``; times are whole microseconds; every
operator carries ``Device``, ``External id``, ``Trace name`` and ``Trace iteration``, a runtime
call its ``cbid``, ``correlation``, ``external id`` and ``external ts``, and a kernel or copy the
``external id`` of the operator that launched it; launches are linked by ``"cat": "async"`` flow
events named ``launch``; the file opens with ``process_name`` / ``process_labels`` metadata and
one ``"cat": "Trace"`` span over the whole profile. There are no Python-stack or GPU-side
annotation events.
"""

from __future__ import annotations

from typing import Any

from autotune.profiling.synth import TraceBuilder

CATEGORIES = {"cpu_op": "Operator", "user_annotation": "Operator", "cuda_runtime": "Runtime",
              "kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}  # fmt: skip
"""Today's category -> the 2021 one; events of other categories did not exist then."""

CBID = {"cudaLaunchKernel": 211, "cudaMemcpyAsync": 41, "cudaStreamSynchronize": 131,
        "cudaDeviceSynchronize": 165, "cudaMemsetAsync": 51, "cudaEventRecord": 135}  # fmt: skip
"""CUPTI's callback id of each runtime call (the ``cbid`` argument)."""

DEVICE = {"id": 0, "name": "Tesla V100-SXM2-16GB", "totalGlobalMem": 16945512448, "computeMajor": 7,
          "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
          "regsPerBlock": 65536, "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
          "sharedMemPerMultiprocessor": 98304, "numSms": 80, "sharedMemPerBlockOptin": 98304}  # fmt: skip
"""One ``deviceProperties`` entry, with the fields of that time (a V100's values)."""


class Kineto2021Builder(TraceBuilder):
    """:class:`TraceBuilder` writing the 2021 format; the same calls build the same timeline."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.meta["deviceProperties"] = [dict(DEVICE, id=self.device)]
        self._ext = 0  # External id of the latest operator, which launches what follows
        self._ext_ts = 0
        self._ext_of_corr: dict[int, int] = {}

    def _x(self, cat: str, name: str, ts: float, dur: float, pid, tid, args=None) -> dict:
        if cat not in CATEGORIES:
            return {}
        ev = {
            "ph": "X",
            "cat": CATEGORIES[cat],
            "name": name,
            "pid": pid,
            "tid": self._tid(cat, tid),
        }
        ev["ts"], ev["dur"] = round(self.t0 + ts), round(dur)
        ev["args"] = self._args(cat, name, ev["ts"], ev["dur"], args or {})
        self.events.append(ev)
        return ev

    def _tid(self, cat: str, tid) -> str:
        return f"stream {tid}" if CATEGORIES[cat] in ("Kernel", "Memcpy", "Memset") else str(tid)

    def _args(self, cat: str, name: str, ts: int, dur: int, args: dict) -> dict:
        corr = args.get("correlation")
        if cat in ("cpu_op", "user_annotation"):
            self._ext, self._ext_ts = len(self.events) + 1, ts
            return {
                "Device": self.pid,
                "External id": self._ext,
                "Trace name": "PyTorch Profiler",
                "Trace iteration": 0,
            }
        if cat == "cuda_runtime":
            self._ext_of_corr[corr] = self._ext
            return {
                "cbid": CBID.get(name, 211),
                "correlation": corr,
                "external id": self._ext,
                "external ts": self._ext_ts,
            }
        out: dict[str, Any] = {"queued": 0} if cat == "kernel" else {}
        out.update({"device": self.device, "context": 1, "stream": args["stream"]})
        if corr is not None:
            out.update({"correlation": corr, "external id": self._ext_of_corr.get(corr, 0)})
        if cat == "kernel":
            out.update({"registers per thread": 32, "shared memory": 0, "blocks per SM": 1.0, "warps per SM": 8.0,
                        "grid": [80, 1, 1], "block": [256, 1, 1], "est. achieved occupancy %": 12})  # fmt: skip
        else:
            size = 6000 * max(dur, 1)  # bytes moved at 6 GB/s, a pageable copy's rate
            out.update({"bytes": size, "memory bandwidth (GB/s)": size / max(dur, 1) / 1e3})
        return out

    def flow(self, corr: int, host_ts: float, device_ts: float, stream: int = 7) -> None:
        self.events.append(
            {
                "ph": "f",
                "id": corr,
                "pid": self.device,
                "tid": f"stream {stream}",
                "ts": round(self.t0 + device_ts),
                "cat": "async",
                "name": "launch",
                "bp": "e",
            }
        )
        self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": self.tid, "ts": round(self.t0 + host_ts),
                            "cat": "async", "name": "launch"})  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        t0 = round(self.t0)
        end = max((e["ts"] + e.get("dur", 0) for e in self.events), default=t0)
        meta = [
            {"name": "process_name", "ph": "M", "ts": t0, "pid": self.pid, "tid": 0, "args": {"name": "python"}},
            {"name": "process_labels", "ph": "M", "ts": t0, "pid": self.pid, "tid": 0, "args": {"labels": "CPU"}},
            {"name": "process_name", "ph": "M", "ts": t0, "pid": self.device, "tid": 0, "args": {"name": "python"}},
            {"name": "process_labels", "ph": "M", "ts": t0, "pid": self.device, "tid": 0,
             "args": {"labels": f"GPU {self.device}"}},
        ]  # fmt: skip
        threads = sorted({e["tid"] for e in self.events if e.get("cat") in ("Operator", "Runtime")})
        meta += [{"name": "thread_name", "ph": "M", "ts": t0, "pid": self.pid, "tid": tid,
                  "args": {"name": f"thread {tid} (python)"}} for tid in threads]  # fmt: skip
        span = {"ph": "X", "cat": "Trace", "ts": t0, "dur": end - t0, "pid": "Traces", "tid": "PyTorch Profiler",
                "name": "PyTorch Profiler (0)", "args": {"Op count": 0}}  # fmt: skip
        return {**self.meta, "traceEvents": [*meta, *self.events, span]}
