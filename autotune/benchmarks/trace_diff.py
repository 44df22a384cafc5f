"""Kernel milliseconds per profiled step by kind, of two traces side by side, and the difference.

Command (CPU machine; BEFORE and AFTER are traces, ``.json`` or ``.json.gz``, or folders of one
rank's trace as ``python -m autotune profile --out DIR`` writes them)::

    python -m autotune.benchmarks.trace_diff BEFORE AFTER [--markdown | --json]

Each figure is the mean over the trace's profiled steps (``ProfilerStep#N``) of what the step
launched on the device (:mod:`autotune.benchmarks.step_kernels`): per kind of kernel
(:mod:`autotune.benchmarks.kernel_kinds`) the milliseconds and the count, and for each kind that
ran beside another on a second stream the milliseconds it did so; then the kernel time,
the time counted twice by concurrent streams, the busy time, the idle time inside the span and
the span from the first kernel to the last. A second table puts the idle time down to the kind
of kernel each gap preceded, and again to the kind each gap followed. The difference is
``AFTER - BEFORE``. A trace the table cannot be made from (no kernels, a single profiled step,
not a trace) gets one line naming the file, exit code 2 (``--debug``: the traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from autotune.benchmarks.classify import one_trace
from autotune.benchmarks.kernel_kinds import LABELS
from autotune.benchmarks.step_kernels import KINDS, TraceKernels, trace_kernels
from autotune.cli import one_line
from autotune.errors import AutotuneError


@dataclass(frozen=True)
class Row:
    """One line of a table: milliseconds per step (and a count per step, where one applies)."""

    label: str
    before_ms: float
    after_ms: float
    before_n: float | None = None
    after_n: float | None = None

    @property
    def delta_ms(self) -> float:
        return self.after_ms - self.before_ms

    @property
    def delta_n(self) -> float | None:
        if self.before_n is None or self.after_n is None:
            return None
        return self.after_n - self.before_n


def kind_rows(before: TraceKernels, after: TraceKernels) -> list[Row]:
    """Per kind, then the step's totals: kernel time, concurrent, busy, idle, span."""
    rows = [
        Row(
            LABELS[k],
            before.mean_ms(lambda s, k=k: s.kind_ns[k]),
            after.mean_ms(lambda s, k=k: s.kind_ns[k]),
            before.mean_count(k),
            after.mean_count(k),
        )
        for k in KINDS
    ]
    rows += [
        Row(
            f"{LABELS[k]} beside other kinds",
            before.mean_ms(lambda s, k=k: s.beside_ns[k]),
            after.mean_ms(lambda s, k=k: s.beside_ns[k]),
        )
        for k in KINDS
        if any(s.beside_ns[k] for t in (before, after) for s in t.steps)
    ]
    count = [sum(t.mean_count(k) for k in KINDS) for t in (before, after)]
    rows.append(Row("kernel time", *_both(before, after, "kernel_ns"), *count))
    for label, attr in (
        ("concurrent (counted twice)", "concurrent_ns"),
        ("busy", "busy_ns"),
        ("idle inside the span", "idle_ns"),
        ("span, first kernel to last", "span_ns"),
    ):
        rows.append(Row(label, *_both(before, after, attr)))
    return rows


def idle_rows(before: TraceKernels, after: TraceKernels) -> list[tuple[Row, Row]]:
    """Per kind with any idle time next to it: the gaps ending at its kernels, then the gaps
    following them (each column adds up to the idle time inside the span)."""
    pairs = [
        tuple(
            Row(
                LABELS[k],
                before.mean_ms(lambda s, k=k, a=attr: getattr(s, a)[k]),
                after.mean_ms(lambda s, k=k, a=attr: getattr(s, a)[k]),
            )
            for attr in ("idle_before_ns", "idle_after_ns")
        )
        for k in KINDS
    ]
    return [(ahead, behind) for ahead, behind in pairs if any(_ms(ahead) + _ms(behind))]


def _ms(row: Row) -> tuple[float, float]:
    return row.before_ms, row.after_ms


def _both(before: TraceKernels, after: TraceKernels, attr: str) -> tuple[float, float]:
    return before.mean_ms(lambda s: getattr(s, attr)), after.mean_ms(lambda s: getattr(s, attr))


def _n(x: float | None, sign: bool = False) -> str:
    if x is None:
        return ""
    text = f"{x:+.1f}" if sign else f"{x:.1f}"
    return text.removesuffix(".0")


def _cells(row: Row) -> list[str]:
    return [f"{row.before_ms:.3f}", f"{row.after_ms:.3f}", f"{row.delta_ms:+.3f}"]


def _counts(row: Row) -> list[str]:
    return [_n(row.before_n), _n(row.after_n), _n(row.delta_n, sign=True)]


def _tables(before: TraceKernels, after: TraceKernels) -> list[tuple[list[str], list[list[str]]]]:
    kinds = ["kind", "before ms", "after ms", "Δ ms", "before n", "after n", "Δ n"]
    idle = ["idle next to"] + [
        f"{side} {col}"
        for side in ("ahead,", "behind,")
        for col in ("before ms", "after ms", "Δ ms")
    ]
    return [
        (kinds, [[r.label, *_cells(r), *_counts(r)] for r in kind_rows(before, after)]),
        (idle, [[a.label, *_cells(a), *_cells(b)] for a, b in idle_rows(before, after)]),
    ]


def _heading(before: TraceKernels, after: TraceKernels) -> list[str]:
    return [
        f"{name}: {t.path} ({len(t.steps)} steps: {', '.join(f'#{s.step}' for s in t.steps)})"
        for name, t in (("before", before), ("after", after))
    ] + [
        "milliseconds and kernels per profiled step (mean over the steps); Δ = after - before",
        "idle next to a kind: the gaps inside the span just ahead of its kernels, and just "
        "behind them (each column adds up to the idle time)",
    ]


def markdown(before: TraceKernels, after: TraceKernels) -> str:
    lines = [f"- {line}" for line in _heading(before, after)]
    for header, body in _tables(before, after):
        lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines)


def text(before: TraceKernels, after: TraceKernels) -> str:
    lines = _heading(before, after)
    for header, body in _tables(before, after):
        width = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
        lines.append("")
        for cells in [header, *body]:
            first = cells[0].ljust(width[0])
            lines.append("  ".join([first, *(c.rjust(w) for c, w in zip(cells[1:], width[1:]))]))
    return "\n".join(lines)


def to_dict(before: TraceKernels, after: TraceKernels) -> dict:
    def rows(rs: list[Row]) -> list[dict]:
        return [{**asdict(r), "delta_ms": r.delta_ms, "delta_n": r.delta_n} for r in rs]

    return {
        "before": {"path": str(before.path), "steps": [asdict(s) for s in before.steps]},
        "after": {"path": str(after.path), "steps": [asdict(s) for s in after.steps]},
        "kinds": rows(kind_rows(before, after)),
        "idle_ahead": rows([a for a, _ in idle_rows(before, after)]),
        "idle_behind": rows([b for _, b in idle_rows(before, after)]),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m autotune.benchmarks.trace_diff", description=__doc__.split("\n")[0]
    )
    p.add_argument("before", type=Path, help="a trace (.json, .json.gz) or a folder of one")
    p.add_argument("after", type=Path, help="a trace (.json, .json.gz) or a folder of one")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--markdown", action="store_true", help="print GitHub markdown tables")
    out.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")
    args = p.parse_args(argv)
    try:
        before, after = (trace_kernels(one_trace(path)) for path in (args.before, args.after))
    except AutotuneError as exc:
        if args.debug:
            raise
        print(f"trace_diff: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    if args.json:
        print(json.dumps(to_dict(before, after), indent=2))
    else:
        print(markdown(before, after) if args.markdown else text(before, after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
