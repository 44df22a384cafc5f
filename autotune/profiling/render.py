"""Text rendering of a :class:`ClassifyResult` (and of an HTA comparison)."""

from __future__ import annotations

from autotune.profiling.hta_check import QUANTITIES, HtaComparison
from autotune.profiling.result import BUCKETS, ClassifyResult

_NAME_WIDTH = 70


def _short(name: str) -> str:
    return name if len(name) <= _NAME_WIDTH else name[: _NAME_WIDTH - 3] + "..."


def render_text(result: ClassifyResult, hta: HtaComparison | None = None) -> str:
    steps = sum(len(r.steps) for r in result.ranks)
    lines = [
        f"{result.steps} steps x {len(result.ranks)} rank(s), {result.device} trace, "
        f"median step {result.step_time_ms:.3f} ms, dominant: {result.dominant}",
        *(f"note: {n}" for n in result.notes),
        "",
        f"{'bucket':<16} {'share':>7} {'ms/step':>10}",
    ]
    buckets, totals = result.buckets, result.buckets_ns
    for b in BUCKETS:
        lines.append(f"{b:<16} {buckets[b]:>7.1%} {totals[b] / 1e6 / steps:>10.3f}")
    if len(result.ranks) > 1:
        lines += ["", f"{'rank':>4} {'step ms':>9} " + " ".join(f"{b:>15}" for b in BUCKETS)]
        for r in result.ranks:
            fr = r.to_dict()["buckets"]
            cells = " ".join(f"{fr[b]:>15.1%}" for b in BUCKETS)
            lines.append(f"{r.rank:>4} {r.step_time_ms:>9.3f} {cells}")
    if result.straggler:
        s = result.straggler.to_dict()
        lines += [
            "",
            f"straggler: rank {s['rank']}, {s['step_time_ms']:.3f} ms per step, "
            f"+{s['excess_ms']:.3f} ms ({s['excess_fraction']:+.1%}) over the other ranks' median",
        ]
    if result.sync_calls:
        lines += ["", f"blocking calls: {'host ms':>9} {'count':>7}  call (under operator)"]
        for c in result.sync_calls:
            under = f" (under {_short(c.under)})" if c.under else ""
            lines.append(f"{'':<15} {c.total_ns / 1e6:>10.3f} {c.count:>7}  {c.call}{under}")
    what = "kernels" if result.device == "gpu" else "compute ops"
    lines += [
        "",
        f"launch: {result.launch.kernels_per_step:g} {what} per step, "
        f"median gap {result.launch.median_launch_gap_us:.1f} us",
        "",
        f"top {what}: {'total ms':>10} {'count':>7} {'share':>6}  name",
    ]
    for k in result.top_kernels:
        lines.append(
            f"{'':<{len(what) + 5}} {k.total_ns / 1e6:>10.3f} {k.count:>7} {k.share:>6.1%}  {_short(k.name)}"
        )
    if hta is not None:
        lines += ["", *render_hta(hta)]
    return "\n".join(lines)


def render_hta(hta: HtaComparison) -> list[str]:
    if not hta.applicable:
        return [f"HTA cross-check: {hta.status}"]
    lines = [
        f"HTA cross-check (us): {'rank':>4} {'quantity':<13} {'ours':>12} {'HTA':>12} {'diff':>10}"
    ]
    for r in hta.ranks:
        for q in QUANTITIES:
            lines.append(
                f"{'':<21} {r.rank:>4} {q:<13} {r.ours_us[q]:>12.1f} {r.hta_us[q]:>12.1f} {r.diff_us(q):>10.1f}"
            )
    return lines
