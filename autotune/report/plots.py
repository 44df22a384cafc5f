"""The report's figures as base64 PNG (matplotlib, Agg), so that the page holds them itself.

Optuna's matplotlib visualisations draw the optimisation history and the parameter importances
(from the study); the throughput-memory scatter and the time-bucket bars are drawn from the
:class:`~autotune.report.model.Report`. A figure that cannot be drawn is a note, never an error.
"""

from __future__ import annotations

import base64
import io
import warnings
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display, the same pixels everywhere

import matplotlib.pyplot as plt  # noqa: E402
import optuna  # noqa: E402

from autotune.profiling.result import BUCKETS  # noqa: E402
from autotune.report.model import Report, measured_study  # noqa: E402
from autotune.report.parts import Profile  # noqa: E402

GIB = 2**30
BUCKET_COLORS = {
    "compute_serial": "#4e79a7",
    "comm_wait": "#f28e2b",
    "launch_overhead": "#e15759",
    "sync_wait": "#b07aa1",
    "data_stall": "#76b7b2",
    "other": "#bab0ac",
}


@dataclass
class Figure:
    """One figure of the page: a base64 PNG, or a note saying why there is none."""

    title: str
    png: str | None = None
    note: str | None = None


def figures(report: Report, study: optuna.Study) -> dict[str, Figure]:
    """Every figure of the page by name: history, importances, throughput_memory, buckets."""
    # Parameter names and tags come from the run folder: drawn as written, never as mathtext ("$\\frac{$"
    # would fail to parse and end the report).
    with warnings.catch_warnings(), plt.rc_context({"text.parse_math": False}):
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # Optuna's plots
        return {
            "history": history(report, study),
            "importances": importances(report, study),
            "throughput_memory": throughput_memory(report),
            "buckets": buckets(report),
        }


def png(fig: plt.Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def history(report: Report, study: optuna.Study) -> Figure:
    title = "Optimisation history"
    if not any(t.state == "COMPLETE" for t in report.trials):
        return Figure(title, note="no completed trial yet")
    ax = optuna.visualization.matplotlib.plot_optimization_history(study, target_name="samples/s")
    ax.figure.set_size_inches(7.5, 4)
    return Figure(title, png=png(ax.figure))


def importances(report: Report, study: optuna.Study) -> Figure:
    title = "Parameter importances for samples/s (PED-ANOVA)"
    if report.importances is None:
        return Figure(
            title,
            note="not computed: "
            + next(
                (n for n in report.notes if n.startswith("parameter importances")),
                "too few completed trials",
            ),
        )
    with warnings.catch_warnings():  # optuna's notes on its quantiles are not the reader's concern
        warnings.simplefilter("ignore", UserWarning)
        ax = optuna.visualization.matplotlib.plot_param_importances(
            measured_study(study), target_name="samples/s", params=list(report.importances)
        )
    ax.figure.set_size_inches(7.5, max(2.5, 0.45 * len(report.importances) + 1.2))
    return Figure(title, png=png(ax.figure))


def throughput_memory(report: Report) -> Figure:
    """Samples/s against peak memory for every measured trial, the Pareto front and the budget."""
    title = "Samples/s against peak memory"
    rows = [
        t
        for t in report.trials
        if t.samples_per_s is not None
        and t.peak_memory_bytes is not None
        and t.outcome in ("ok", "over budget")
    ]
    if not rows:
        return Figure(title, note="no measured trial yet")
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for outcome, style in (
        ("ok", {"marker": "o", "color": "#4e79a7"}),
        ("over budget", {"marker": "x", "color": "#e15759"}),
    ):
        pts = [t for t in rows if t.outcome == outcome]
        if pts:
            ax.scatter(
                [t.peak_memory_bytes / GIB for t in pts],
                [t.samples_per_s for t in pts],
                label=outcome,
                zorder=3,
                **style,
            )
    front = sorted((t for t in rows if t.pareto), key=lambda t: t.peak_memory_bytes)
    ax.step(
        [t.peak_memory_bytes / GIB for t in front],
        [t.samples_per_s for t in front],
        where="post",
        color="#59a14f",
        lw=1.5,
        label="Pareto front",
        zorder=2,
    )
    for t in rows:
        tag = f"#{t.number}" + (" stock" if t.stock else "") + (" best" if t.best else "")
        ax.annotate(
            tag,
            (t.peak_memory_bytes / GIB, t.samples_per_s),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=7,
        )
    _budget_line(ax, report.summary.memory_budget_bytes, max(t.peak_memory_bytes for t in rows))
    ax.set_xlabel("peak memory (GiB)")
    ax.set_ylabel("samples/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return Figure(title, png=png(fig))


def _budget_line(ax: plt.Axes, budget: int | None, highest: int) -> None:
    if budget is None:
        return
    if budget <= 1.5 * highest:
        ax.axvline(
            budget / GIB,
            color="#e15759",
            ls="--",
            lw=1,
            label=f"memory budget {budget / GIB:.1f} GiB",
        )
    else:  # drawn to scale, the points would crowd into the left edge
        ax.text(
            0.99,
            0.02,
            f"memory budget {budget / GIB:.1f} GiB (off the chart, right) \u2192",
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize=8,
            color="#e15759",
        )


def buckets(report: Report) -> Figure:
    """Milliseconds per step in each time bucket, stock and best, one bar per rank."""
    title = "Where a step's time goes, per rank"
    bars = _bucket_bars(report.stock_profile, report.best_profile)
    if not bars:
        return Figure(
            title, note="no classified profile of the stock or the best trial in the run folder"
        )
    fig, ax = plt.subplots(figsize=(7.5, 1.0 + 0.45 * len(bars)))
    labels = [label for label, _ in bars]
    left = [0.0] * len(bars)
    for b in BUCKETS:
        widths = [shares.get(b, 0.0) * ms for _, (ms, shares) in bars]
        ax.barh(labels, widths, left=left, color=BUCKET_COLORS[b], label=b)
        left = [x + w for x, w in zip(left, widths)]
    ax.invert_yaxis()
    ax.set_xlabel(
        "ms per step (median step, split by the bucket shares; a loader-bound trial at its measured rate)"
    )
    ax.legend(
        fontsize=8, ncol=len(BUCKETS), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False
    )
    ax.grid(axis="x", alpha=0.3)
    return Figure(title, png=png(fig))


def _bucket_bars(
    stock: Profile | None, best: Profile | None
) -> list[tuple[str, tuple[float, dict[str, float]]]]:
    """(label, (step ms, bucket shares)) per rank. A loader-bound trial's bar is its step at the rate
    it really ran (its loader's), the profiled split with the extra wait in ``data_stall``, and says so."""
    shown: list[tuple[str, Profile]] = []
    if stock is not None and best is not None and stock.path == best.path:
        shown.append(("stock = best", stock))
    else:
        shown += [(name, p) for name, p in (("stock", stock), ("best", best)) if p is not None]
    bars = []
    for name, p in shown:
        for r in p.ranks or []:
            ms, shares = p.scaled(r)
            note = (
                f" (loader-bound: profiled {r.step_time_ms:.0f} ms + wait)"
                if ms > r.step_time_ms
                else ""
            )
            bars.append((f"{name} #{p.trial} rank {r.rank}{note}", (ms, shares)))
    return bars
