"""Honest measurement: step timing with the device synchronised, peak memory, the matmul rate for MFU."""

from __future__ import annotations

import resource
import statistics
import time
from dataclasses import dataclass, field

import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_rate(device: torch.device, dtype: torch.dtype = torch.bfloat16) -> float:
    """FLOP/s of a large matmul measured on ``device`` (bf16 on CUDA; fp32 on CPU, where bf16 is
    emulated). On CUDA: products back to back for ``warm_s`` seconds (the GPU reaches its clocks for
    this kernel after some of it), then ``rounds`` rounds of ``per_round`` products each, timed by
    CUDA events around the round with no synchronisation inside it; the median round's rate. A host
    synchronisation after every product leaves the GPU idle between them, and its clocks and the
    figure then vary from process to process."""
    if device.type != "cuda":
        return _cpu_matmul_rate(device)
    n, warm_s, rounds, per_round = 8192, 1.0, 7, 10
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    start = time.perf_counter()
    while time.perf_counter() - start < warm_s:
        for _ in range(8):
            a @ b
        synchronize(device)
    rates = []
    for _ in range(rounds):
        first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        first.record()
        for _ in range(per_round):
            a @ b
        last.record()
        last.synchronize()
        rates.append(2 * n**3 * per_round / (first.elapsed_time(last) / 1e3))
    return statistics.median(rates)


def _cpu_matmul_rate(device: torch.device) -> float:
    n = 1024
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    a @ b
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times)


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> dict[str, int]:
    """Peak allocated and reserved device memory; on CPU the process's peak resident set."""
    if device.type == "cuda":
        return {
            "allocated": torch.cuda.max_memory_allocated(device),
            "reserved": torch.cuda.max_memory_reserved(device),
        }
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"allocated": rss, "reserved": rss}


class StepTimer:
    """Per-step times without serialising host and device.

    On CUDA an event is recorded at every step boundary (no host sync, so the host can run ahead
    as it does in training) and the intervals are read after one synchronisation at the end;
    in steady state they are the step period, data waiting and all device work included. The
    total wall time between two synchronisations is kept beside them as a check. On CPU the
    work is synchronous and the host clock is used.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device
        self._events: list = []
        self._host: list[float] = []
        self.polled = 0
        """Steps already handed out by :meth:`poll`."""

    def start(self) -> None:
        synchronize(self.device)
        self._mark()

    def lap(self) -> None:
        self._mark()

    def _mark(self) -> None:
        self._host.append(time.perf_counter())
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._events.append(ev)

    def poll(self) -> list[float]:
        """Step times completed since the last poll, without waiting (``Event.query`` on CUDA)."""
        done = self.polled
        new: list[float] = []
        while done + 1 < len(self._host):
            if self.cuda:
                end = self._events[done + 1]
                if not end.query():
                    break
                new.append(self._events[done].elapsed_time(end) / 1e3)
            else:
                new.append(self._host[done + 1] - self._host[done])
            done += 1
        self.polled = done
        return new

    def finish(self) -> tuple[list[float], float]:
        """(per-step seconds, wall seconds of the whole window, synchronised)."""
        synchronize(self.device)
        wall = time.perf_counter() - self._host[0]
        if self.cuda:
            steps = [a.elapsed_time(b) / 1e3 for a, b in zip(self._events, self._events[1:])]
        else:
            steps = [b - a for a, b in zip(self._host, self._host[1:])]
        return steps, wall


@dataclass
class Stats:
    median: float
    mean: float
    p10: float
    p90: float
    minimum: float
    maximum: float
    values: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, values: list[float]) -> Stats:
        s = sorted(values)
        q = lambda f: s[min(len(s) - 1, int(round(f * (len(s) - 1))))]  # noqa: E731
        return cls(
            statistics.median(s), statistics.fmean(s), q(0.1), q(0.9), s[0], s[-1], list(values)
        )
