"""The host buffers a checkpoint copies into: a buffer to be page-locked owns whole pages, and its lock
lives exactly as long as its memory (the last view of it, wherever that went)."""

from __future__ import annotations

import gc
import mmap

import torch

from autotune.train.job import state
from autotune.train.job.host_memory import LockedMemory

LAYOUT = [("a", torch.Size([3]), torch.float32), ("b", torch.Size([2]), torch.int64)]


class Recorded(LockedMemory):
    """CUDA's lock and unlock as a record of ranges: what is under test is when they are called."""

    events: list[tuple[str, int, bool]] = []

    def _lock_range(self, address: int, nbytes: int) -> bool:
        self.events.append(("lock", address, self._mapped()))
        return True

    def _unlock_range(self, address: int) -> None:
        self.events.append(("unlock", address, self._mapped()))

    def _mapped(self) -> bool:
        try:
            self[0] = self[0]  # a closed mapping refuses
        except ValueError:
            return False
        return True


def _flat(monkeypatch) -> state._Flat:
    monkeypatch.setattr(state, "LockedMemory", Recorded)
    Recorded.events = []
    return state._Flat(LAYOUT, pin=True)


def test_buffers_to_be_page_locked_start_on_a_page_and_share_none(monkeypatch):
    # small buffers would sit side by side on the heap; locking a page twice is refused by CUDA
    monkeypatch.setattr(state, "LockedMemory", Recorded)
    sizes = (1, 8, 100, 4096, 5000)
    flats = [state._Flat([("x", torch.Size([n]), torch.uint8)], pin=True) for n in sizes]
    spans = []
    for flat, n in zip(flats, sizes):
        start = flat.flat.data_ptr()
        assert start % mmap.PAGESIZE == 0 and flat.flat.numel() % mmap.PAGESIZE == 0
        assert flat.flat.numel() >= n and flat.pin
        spans.append((start, start + flat.flat.numel()))
    spans.sort()
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))


def test_a_view_that_outlives_its_buffer_keeps_the_lock_until_it_goes(monkeypatch):
    flat = _flat(monkeypatch)
    view = flat.views["a"]
    view.copy_(torch.tensor([1.0, 2.0, 3.0]))
    address = flat.flat.data_ptr()
    del flat
    gc.collect()
    assert [e[0] for e in Recorded.events] == ["lock"]  # still in use: still locked
    assert view.tolist() == [1.0, 2.0, 3.0]
    del view
    gc.collect()
    # unlocked once, at its own address, while it was still mapped
    assert Recorded.events == [("lock", address, True), ("unlock", address, True)]


def test_a_released_buffer_is_unlocked_once_and_its_views_stay_readable(monkeypatch):
    flat = _flat(monkeypatch)
    flat.views["b"].copy_(torch.tensor([7, 8]))
    flat.release()
    assert not flat.pin and flat.views["b"].tolist() == [7, 8]
    del flat
    gc.collect()
    assert [e[0] for e in Recorded.events] == ["lock", "unlock"]


def test_a_buffer_not_locked_is_its_exact_size_and_holds_its_views():
    flat = state._Flat(LAYOUT, False)
    assert flat.flat.numel() == 2 * state._Flat.ALIGN and not flat.pin  # each view starts aligned
    flat.views["a"].copy_(torch.tensor([1.0, 2.0, 3.0]))
    flat.views["b"].copy_(torch.tensor([7, 8]))
    assert flat.views["a"].tolist() == [1.0, 2.0, 3.0] and flat.views["b"].tolist() == [7, 8]
