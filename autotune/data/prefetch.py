"""``DevicePrefetcher``: host batches copied to the device ahead of use, on a side CUDA stream.

    batches = DevicePrefetcher(iter(loader), "cuda", depth=2)
    for batch in batches: ...          # batch is on the device, safe to use on the current stream

With CUDA and ``depth > 0`` the ``depth`` batches after the one handed out are being copied with
``non_blocking=True`` on the prefetcher's own stream (pinned host memory makes that asynchronous); before a batch is handed
out the consumer's stream waits for that batch's copy event, and each tensor is marked as used by
the consumer's stream (``record_stream``) so the allocator does not reuse its memory early.
Otherwise it is a pass-through that moves each batch to the device.

``wait_s`` is the time blocked waiting for the loader inside ``__next__``; each wait is also a
``autotune.data_wait`` range of the torch profiler, so traces show data stalls by name.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import torch

WAIT_RANGE = "autotune.data_wait"


class DevicePrefetcher:
    def __init__(
        self, loader_iter: Iterable[dict[str, Any]], device: str | torch.device, depth: int = 2
    ) -> None:
        self._it = iter(loader_iter)
        self.device = torch.device(device)
        self.depth = max(0, int(depth))
        self.wait_s = 0.0
        """Seconds blocked in ``__next__`` waiting for the loader, in total."""
        self.last_wait_s = 0.0
        """Seconds of the latest ``__next__`` spent waiting for the loader."""
        self._cuda = self.device.type == "cuda" and self.depth > 0
        self._stream = torch.cuda.Stream(self.device) if self._cuda else None
        self._ready: deque[tuple[dict[str, Any], torch.cuda.Event]] = deque()
        self._exhausted = self._started = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        self.last_wait_s = 0.0
        if not self._cuda:
            return _to_device(self._fetch(), self.device, non_blocking=self.device.type == "cuda")
        if not self._started:
            self._started = True
            while len(self._ready) < self.depth and not self._exhausted:
                self._enqueue()
        if not self._ready:
            raise StopIteration
        batch, copied = self._ready.popleft()
        if not self._exhausted:
            self._enqueue()  # keep `depth` batches in flight past the one handed out
        consumer = torch.cuda.current_stream(self.device)
        consumer.wait_event(copied)
        for value in batch.values():
            if isinstance(value, torch.Tensor):
                value.record_stream(consumer)
        return batch

    def _fetch(self) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            with torch.profiler.record_function(WAIT_RANGE):
                return next(self._it)
        finally:
            waited = time.perf_counter() - start
            self.last_wait_s += waited
            self.wait_s += waited

    def _enqueue(self) -> None:
        try:
            host = self._fetch()
        except StopIteration:
            self._exhausted = True
            return
        with torch.cuda.stream(self._stream):
            batch = _to_device(host, self.device, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self._stream)
        self._ready.append((batch, copied))


def _to_device(batch: dict[str, Any], device: torch.device, non_blocking: bool) -> dict[str, Any]:
    return {
        k: v.to(device, non_blocking=non_blocking) if isinstance(v, torch.Tensor) else v
        for k, v in batch.items()
    }
