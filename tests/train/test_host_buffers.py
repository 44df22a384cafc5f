"""The host buffers a checkpoint copies into: buffers to be page-locked own whole pages."""

import torch

from autotune.train.job.state import _Flat


def test_buffers_to_be_page_locked_start_on_a_page_and_share_none():
    # small buffers sit side by side on the heap; locking a page twice is refused by CUDA
    flats = [_Flat._buffer(n, pin=True) for n in (1, 8, 100, 4096, 5000)]
    spans = []
    for flat, n in zip(flats, (1, 8, 100, 4096, 5000)):
        start = flat.data_ptr()
        assert start % _Flat.PAGE == 0 and flat.numel() % _Flat.PAGE == 0 and flat.numel() >= n
        spans.append((start, start + flat.numel()))
    spans.sort()
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))


def test_a_buffer_not_locked_is_its_exact_size_and_holds_its_views():
    flat = _Flat(
        [("a", torch.Size([3]), torch.float32), ("b", torch.Size([2]), torch.int64)], False
    )
    assert flat.flat.numel() == 2 * _Flat.ALIGN and not flat.pin  # each view starts aligned
    flat.views["a"].copy_(torch.tensor([1.0, 2.0, 3.0]))
    flat.views["b"].copy_(torch.tensor([7, 8]))
    assert flat.views["a"].tolist() == [1.0, 2.0, 3.0] and flat.views["b"].tolist() == [7, 8]
