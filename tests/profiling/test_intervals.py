"""Interval arithmetic against a brute-force model: a set of unit cells on a small integer line."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.profiling import intervals as iv

LINE = 60

interval = st.tuples(st.integers(0, LINE), st.integers(0, LINE)).map(sorted)
interval_lists = st.lists(interval, max_size=8)


def as_set(pairs) -> iv.Intervals:
    return iv.make([a for a, _ in pairs], [b for _, b in pairs])


def cells(pairs) -> set[int]:
    return {t for a, b in pairs for t in range(a, b)}


def cells_of(ivs: iv.Intervals) -> set[int]:
    return cells(zip(ivs[0].tolist(), ivs[1].tolist()))


def is_merged(ivs: iv.Intervals) -> bool:
    s, e = ivs
    return bool(np.all(e > s) and np.all(s[1:] > e[:-1]))


@given(interval_lists, interval_lists)
@settings(max_examples=200, deadline=None)
def test_set_operations_match_cells(a, b):
    A, B = iv.merge(as_set(a)), iv.merge(as_set(b))
    assert cells_of(A) == cells(a) and is_merged(A)
    for got, want in (
        (iv.union(A, B), cells(a) | cells(b)),
        (iv.intersect(A, B), cells(a) & cells(b)),
        (iv.subtract(A, B), cells(a) - cells(b)),
    ):
        assert cells_of(got) == want
        assert is_merged(got)
    assert iv.total(A) == len(cells(a))


@given(st.lists(interval_lists, min_size=1, max_size=4), interval)
@settings(max_examples=200, deadline=None)
def test_paint_gives_each_cell_to_the_first_layer_that_covers_it(layers, window):
    lo, hi = window
    got = iv.paint([as_set(layer) for layer in layers], lo, hi)
    want = [0] * (len(layers) + 1)
    for t in range(lo, hi):
        owner = next((i for i, layer in enumerate(layers) if t in cells(layer)), len(layers))
        want[owner] += 1
    assert got.tolist() == want
    assert got.sum() == hi - lo


def test_gaps_and_contains():
    busy = iv.make([10, 30], [20, 40])
    assert iv.gaps(busy, 0, 50)[0].tolist() == [0, 20, 40]
    assert iv.contains(busy, np.array([9, 10, 19, 20, 35])).tolist() == [
        False,
        True,
        True,
        False,
        True,
    ]
