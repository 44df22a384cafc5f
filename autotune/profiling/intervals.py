"""Interval arithmetic on numpy arrays of integer nanoseconds.

An interval set is a pair ``(starts, ends)`` of int64 arrays, half-open ``[start, end)``. The
functions accept unsorted, overlapping input; what they return is *merged*: sorted, disjoint and
non-touching. Everything is a sort plus cumulative sums, so the cost is ``O(n log n)`` in numpy
with no per-interval Python work, and the arithmetic on int64 is exact (the buckets of a step add
up to the step time to the nanosecond).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]

_EMPTY = np.zeros(0, dtype=np.int64)


def empty() -> Intervals:
    return _EMPTY, _EMPTY


def make(starts, ends) -> Intervals:
    """An interval set from two sequences, dropping empty intervals (``end <= start``)."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    return s[keep], e[keep]


def merge(iv: Intervals) -> Intervals:
    """Union of possibly overlapping intervals, as a merged set."""
    s, e = make(*iv)
    if len(s) == 0:
        return empty()
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    # A new group starts where an interval begins after everything before it has ended.
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(s)) - 1
    return s[first], reach[last]


def total(iv: Intervals) -> int:
    """Covered length of a *merged* set."""
    s, e = iv
    return int((e - s).sum())


def clip(iv: Intervals, lo: int, hi: int) -> Intervals:
    """The parts of ``iv`` inside ``[lo, hi)`` (merged if ``iv`` was)."""
    s, e = iv
    return make(np.maximum(s, lo), np.minimum(e, hi))


def contains(iv: Intervals, points: np.ndarray) -> np.ndarray:
    """Whether each point lies inside the *merged* set."""
    s, e = iv
    if len(s) == 0:
        return np.zeros(len(points), dtype=bool)
    k = np.searchsorted(s, points, side="right") - 1
    return (k >= 0) & (points < e[np.maximum(k, 0)])


def _coverage(sets: Sequence[Intervals]) -> tuple[np.ndarray, np.ndarray]:
    """Sweep all sets at once: segment boundaries and, per set, whether it covers each segment.

    Returns ``points`` (n+1 sorted boundaries, one segment between neighbours) and ``covered``
    (k x n booleans). Ties are harmless: zero-length segments get zero weight.
    """
    k = len(sets)
    pts = np.concatenate([np.concatenate([s, e]) for s, e in sets] or [_EMPTY])
    delta = np.zeros((k, len(pts)), dtype=np.int32)
    pos = 0
    for i, (s, _) in enumerate(sets):
        n = len(s)
        delta[i, pos : pos + n] = 1
        delta[i, pos + n : pos + 2 * n] = -1
        pos += 2 * n
    order = np.argsort(pts, kind="stable")
    pts = pts[order]
    covered = np.cumsum(delta[:, order], axis=1)[:, :-1] > 0
    return pts, covered


def _segments_to_set(pts: np.ndarray, keep: np.ndarray) -> Intervals:
    s, e = pts[:-1][keep], pts[1:][keep]
    return merge((s, e))


def intersect(a: Intervals, b: Intervals) -> Intervals:
    pts, cov = _coverage([a, b])
    return _segments_to_set(pts, cov[0] & cov[1])


def subtract(a: Intervals, b: Intervals) -> Intervals:
    pts, cov = _coverage([a, b])
    return _segments_to_set(pts, cov[0] & ~cov[1])


def union(*sets: Intervals) -> Intervals:
    if not sets:
        return empty()
    return merge((np.concatenate([s for s, _ in sets]), np.concatenate([e for _, e in sets])))


def gaps(iv: Intervals, lo: int, hi: int) -> Intervals:
    """The complement of a merged set inside ``[lo, hi)``."""
    s, e = clip(iv, lo, hi)
    return make(np.concatenate([[lo], e]), np.concatenate([s, [hi]]))


def paint(layers: Sequence[Intervals], lo: int, hi: int) -> np.ndarray:
    """Attribute every nanosecond of ``[lo, hi)`` to the first layer that covers it.

    Returns ``len(layers) + 1`` int64 durations; the last is the time no layer covers. They sum
    to ``hi - lo`` exactly.
    """
    clipped = [clip(layer, lo, hi) for layer in layers]
    window = (np.array([lo], dtype=np.int64), np.array([hi], dtype=np.int64))
    pts, cov = _coverage([*clipped, window])
    length = np.diff(pts)
    inside = cov[-1]
    out = np.zeros(len(layers) + 1, dtype=np.int64)
    claimed = np.zeros(len(length), dtype=bool)
    for i in range(len(layers)):
        mine = cov[i] & inside & ~claimed
        out[i] = int(length[mine].sum())
        claimed |= mine
    out[-1] = (hi - lo) - int(out[:-1].sum())
    return out
