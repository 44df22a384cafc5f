"""Cross-check the classifier's device timeline against HTA (HolisticTraceAnalysis).

Command::

    python -m autotune classify PATH --hta

HTA's temporal breakdown measures, per rank, over the span from the first to the last kernel of
the profiled steps: idle time (no kernel on any stream), compute time (union of computation
kernels; memcpy, memset and NCCL excluded) and, from ``get_comm_comp_overlap``, the fraction of
communication-kernel time overlapped by computation. We compute the same three quantities with
our own parser, kernel table and interval arithmetic over the same kernels (those launched by
the steps), and report both with their differences. A difference points at a parsing or
kernel-naming disagreement, not at the bucket definitions (ours count memcpy and memset as
compute; HTA's do not, which is why we compare like with like here).

HTA is imported lazily (it is slow to import) with ``HTA_DISABLE_NS_ROUNDING=1`` so that it
keeps Kineto's nanosecond timestamps. Traces without device events are reported as
"not applicable (no GPU events)": HTA's analyses fail on them.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.profiling import intervals as iv
from autotune.profiling.classify import launched_in_steps
from autotune.profiling.kinds import DEVICE_TABLE, DeviceKind, kinds_of
from autotune.profiling.trace import RankTrace

NOT_APPLICABLE = "not applicable (no GPU events)"


@dataclass(frozen=True)
class HtaRank:
    """One rank: our value and HTA's, in microseconds."""

    rank: int
    ours_us: dict[str, float]
    hta_us: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            **{
                q: {
                    "ours_us": self.ours_us[q],
                    "hta_us": self.hta_us[q],
                    "diff_us": self.diff_us(q),
                }
                for q in QUANTITIES
            },
        }

    def diff_us(self, quantity: str) -> float:
        return self.ours_us[quantity] - self.hta_us[quantity]


QUANTITIES = ("span", "idle", "compute", "exposed_comm")


@dataclass(frozen=True)
class HtaComparison:
    status: str
    """``"ok"``, :data:`NOT_APPLICABLE`, or why HTA could not run."""
    ranks: tuple[HtaRank, ...] = ()

    @property
    def applicable(self) -> bool:
        return self.status == "ok"

    def max_abs_diff_fraction(self) -> float:
        """Largest |ours - HTA| over all quantities and ranks, as a fraction of the rank's span."""
        worst = 0.0
        for r in self.ranks:
            span = max(r.hta_us["span"], 1e-9)
            worst = max(worst, *(abs(r.diff_us(q)) / span for q in QUANTITIES))
        return worst

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "ranks": [r.to_dict() for r in self.ranks]}


def ours_for_rank(trace: RankTrace) -> dict[str, float]:
    """Span, idle, compute and exposed communication of the step-launched kernels, in µs."""
    dev = trace.device.take(launched_in_steps(trace))
    kind = kinds_of(DEVICE_TABLE, trace.names)[dev.name]
    busy = iv.merge((dev.start, dev.end))
    compute = iv.merge((dev.start[kind == DeviceKind.COMPUTE], dev.end[kind == DeviceKind.COMPUTE]))
    comm = iv.merge((dev.start[kind == DeviceKind.COMM], dev.end[kind == DeviceKind.COMM]))
    span = int(busy[1][-1] - busy[0][0]) if len(busy[0]) else 0
    return {
        "span": span / 1000,
        "idle": (span - iv.total(busy)) / 1000,
        "compute": iv.total(compute) / 1000,
        "exposed_comm": iv.total(iv.subtract(comm, compute)) / 1000,
    }


def _hta_values(trace_files: dict[int, str], trace_dir: str) -> dict[int, dict[str, float]]:
    import logging  # here, with HTA: `autotune classify` without --hta does not pay for it

    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    logging.getLogger("hta").setLevel(logging.ERROR)
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(
        trace_files=trace_files, trace_dir=trace_dir, include_last_profiler_step=True
    )
    breakdown = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    overlap = analysis.get_comm_comp_overlap(visualize=False).set_index("rank")
    comm_us = _hta_comm_time(analysis)
    out = {}
    for rank in breakdown.index:
        pct = float(overlap.loc[rank, "comp_comm_overlap_pctg"])
        comm = comm_us.get(rank, 0.0)
        out[int(rank)] = {
            "span": float(breakdown.loc[rank, "kernel_time(us)"]),
            "idle": float(breakdown.loc[rank, "idle_time(us)"]),
            "compute": float(breakdown.loc[rank, "compute_time(us)"]),
            "exposed_comm": 0.0 if not comm or math.isnan(pct) else comm * (1 - pct / 100),
        }
    return out


def _hta_comm_time(analysis) -> dict[int, float]:
    """Merged time of HTA's communication kernels per rank (HTA reports only the ratio)."""
    from hta.utils.utils import is_comm_kernel

    sym = analysis.t.symbol_table.get_sym_table()
    out = {}
    for rank, df in analysis.t.traces.items():
        kernels = df[df["stream"].ne(-1)]
        comm = kernels[kernels["name"].map(lambda i: is_comm_kernel(sym[i]))]
        merged = iv.merge(
            (
                np.rint(comm["ts"].to_numpy() * 1000),
                np.rint((comm["ts"] + comm["dur"]).to_numpy() * 1000),
            )
        )
        out[int(rank)] = iv.total(merged) / 1000
    return out


def compare_with_hta(traces: list[RankTrace]) -> HtaComparison:
    """Our idle, compute and exposed-communication time against HTA's, per rank."""
    if not any(len(t.device) for t in traces):
        return HtaComparison(NOT_APPLICABLE)
    files = {t.rank: str(t.path.resolve()) for t in traces}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # HTA's pandas deprecation warnings are not ours
            theirs = _hta_values(files, str(traces[0].path.resolve().parent))
    except Exception as exc:  # HTA raises anything from KeyError to ZeroDivisionError
        return HtaComparison(f"HTA failed: {type(exc).__name__}: {exc}")
    ranks = tuple(
        HtaRank(t.rank, ours_for_rank(t), theirs[t.rank]) for t in traces if t.rank in theirs
    )
    return HtaComparison("ok", ranks)
