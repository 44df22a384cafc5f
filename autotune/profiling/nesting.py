"""Nesting of host operators on one thread: depth, parent, self time, innermost operator.

On a host thread, profiler spans nest (``aten::linear`` contains ``aten::addmm``, which contains
``aten::expand``). Which operator is *innermost* at each instant decides whether that instant
is arithmetic or framework glue. Everything here is vectorised: a lexicographic sort, binary
searches, and one loop over depth levels (tens, not events).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.profiling import intervals as iv


@dataclass
class Nest:
    """Operators of one thread sorted by (start, -end), with their depth and parent."""

    start: np.ndarray
    end: np.ndarray
    index: np.ndarray  # position of each sorted operator in the input arrays
    depth: np.ndarray
    parent: np.ndarray  # sorted position of the enclosing operator, -1 for top level


def nest(start: np.ndarray, end: np.ndarray) -> Nest:
    order = np.lexsort((-end, start))
    s, e = start[order], end[order]
    n = len(s)
    # Operators still open when operator i starts = those sorted before it minus those ended.
    ended = np.searchsorted(np.sort(e), s, side="right")
    depth = np.maximum(np.arange(n) - ended, 0)
    parent = np.full(n, -1, dtype=np.int64)
    positions = np.arange(n)
    for d in range(1, int(depth.max(initial=0)) + 1):
        here = positions[depth == d]
        above = positions[depth == d - 1]
        if len(above) == 0:
            break
        k = np.searchsorted(above, here) - 1
        ok = k >= 0
        parent[here[ok]] = above[k[ok]]
    return Nest(s, e, order, depth, parent)


def self_time(n: Nest) -> np.ndarray:
    """Duration minus the children's durations, per sorted operator (clipped at zero)."""
    dur = n.end - n.start
    has_parent = n.parent >= 0
    children = np.bincount(n.parent[has_parent], weights=dur[has_parent], minlength=len(dur))
    return np.maximum(dur - children.astype(np.int64), 0)


def innermost(n: Nest, flag: np.ndarray) -> iv.Intervals:
    """The time during which the innermost operator has ``flag`` (a bool per sorted operator).

    Telescoping: give each operator ``flag - flag(parent)``; summed over the chain of operators
    open at an instant, that is the flag of the innermost one.
    """
    f = flag.astype(np.int64)
    parent_flag = np.where(n.parent >= 0, f[np.maximum(n.parent, 0)], 0)
    u = f - parent_flag
    moves = u != 0
    if not moves.any():
        return iv.empty()
    pts = np.concatenate([n.start[moves], n.end[moves]])
    delta = np.concatenate([u[moves], -u[moves]])
    order = np.argsort(pts, kind="stable")
    pts, level = pts[order], np.cumsum(delta[order])
    on = level[:-1] == 1
    return iv.merge((pts[:-1][on], pts[1:][on]))
