"""The GPU suite's derived numbers and its markdown table, computed from the suite's JSON.

``rows(results)`` turns the runs' records into one comparable row per configuration (MFU as
every figure of autotune defines it, from the record alone:
:func:`autotune.train.trial.record.model_flops_utilization`; speed-up against ``stock`` of the same
run, loss parity); ``markdown(results)`` renders those rows and the profiles. Both read only the
JSON the suite writes (each run's record), so a table can be rebuilt from a saved file.
"""

from __future__ import annotations

from typing import Any

from autotune.train.trial.record import Measurement, TrialRecord, model_flops_utilization

GIB = 2**30


def mfu(run: Measurement, *, useful: bool = False) -> float | None:
    """The run's MFU (None where its record lacks the FLOPs or the matmul rate), as a study's
    ``trials.csv`` gives it for the same record.

    ``useful``: count only the FLOPs that reach the loss or a gradient
    (``useful_flops_per_sample``) instead of the upstream step's (``flops_per_sample``, dead work
    included)."""
    flops = run.useful_flops_per_sample if useful else run.flops_per_sample
    if not run.matmul_tflops or flops is None:
        return None
    return model_flops_utilization(flops, run.samples_per_s, run.world_size, run.matmul_tflops)


def record_of(row: dict[str, Any]) -> TrialRecord:
    """The run's record in a row of the suite's ``runs``."""
    return TrialRecord.from_dict(row["record"], where="runs[].record")


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per configuration, in run order: the numbers of the table."""
    runs = results.get("runs", {})
    records = {name: record_of(r) for name, r in runs.items() if "skipped" not in r}
    stock = records.get("stock")
    base = (
        stock.measurement.samples_per_s
        if stock is not None and stock.measurement is not None
        else None
    )
    out = []
    for name, row in runs.items():
        if "skipped" in row:
            out.append({"name": name, "skipped": row["skipped"]})
            continue
        rec = records[name]
        m = rec.measurement
        if m is None:
            failure = rec.failure
            out.append(
                {
                    "name": name,
                    "error": failure.error if failure else "not measured",
                    "reason": failure.reason if failure else "error",
                }
            )
            continue
        par = results["runs"][name].get("parity")
        out.append(
            {
                "name": name,
                "samples_per_s": m.samples_per_s,
                "step_time_ms": m.step_time.median_ms,
                "p10_ms": m.step_time.p10_ms,
                "p90_ms": m.step_time.p90_ms,
                "peak_memory_gib": m.memory.allocated_bytes / GIB,
                "peak_reserved_gib": (
                    None if m.memory.reserved_bytes is None else m.memory.reserved_bytes / GIB
                ),
                "mfu": mfu(m),
                "useful_mfu": mfu(m, useful=True),
                "speedup_vs_stock": m.samples_per_s / base if base else None,
                "parity_passed": par["passed"] if par else None,
                "loss_rel_diff": par["loss_rel_diff"] if par else None,
                "grad_norm_rel_diff": par["grad_norm_rel_diff"] if par else None,
            }
        )
    return out


def _pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f} %"


def _row(r: dict[str, Any]) -> str:
    if "skipped" in r:
        return f"| {r['name']} | skipped: {r['skipped'][:120]} | | | | | | |"
    if "error" in r:
        return f"| {r['name']} | ERROR ({r['reason']}): {r['error'][:120]} | | | | | | |"
    speed = "-" if r["speedup_vs_stock"] is None else f"{r['speedup_vs_stock']:.2f}"
    if r["parity_passed"] is None:
        parity = "-"
    else:
        verdict = "PASS" if r["parity_passed"] else "FAIL"
        parity = f"{verdict} {_pct(r['loss_rel_diff'], 2)} / {_pct(r['grad_norm_rel_diff'], 2)}"
    return (
        f"| {r['name']} | {r['samples_per_s']:.1f} | {r['step_time_ms']:.1f} | "
        f"{r['p10_ms']:.0f}–{r['p90_ms']:.0f} | {_peak(r)} | {_mfus(r)} | "
        f"{speed} | {parity} |"
    )


def _peak(r: dict[str, Any]) -> str:
    """``allocated / reserved`` GiB: a memory budget caps the reserved figure."""
    if r.get("peak_reserved_gib") is None:
        return f"{r['peak_memory_gib']:.1f}"
    return f"{r['peak_memory_gib']:.1f} / {r['peak_reserved_gib']:.1f}"


def _mfus(r: dict[str, Any]) -> str:
    """``upstream / useful`` where the counts differ (the useful count leaves the dead work out)."""
    if r.get("useful_mfu") is None or r["useful_mfu"] == r["mfu"]:
        return _pct(r["mfu"])
    return f"{_pct(r['mfu'])} / {_pct(r['useful_mfu'])}"


def _profile_line(name: str, p: dict[str, Any]) -> str:
    if "error" in p:
        return f"- {name}: profiling failed ({p.get('reason', 'error')}): {p['error'][:150]}"
    buckets = ", ".join(f"{k} {100 * v:.0f} %" for k, v in (p.get("buckets") or {}).items())
    return (
        f"- {name}: profiling overhead {_pct(p['overhead'])} (profiled {p['profiled_step_ms']:.1f} ms vs "
        f"unprofiled {p['unprofiled_step_ms']:.1f} ms per step); buckets: {buckets or '-'}; "
        f"dominant: {p.get('dominant', '-')}"
    )


def _kernel_lines(name: str, p: dict[str, Any]) -> list[str]:
    """The profile's top kernels, per profiled step (names cut to 90 characters)."""
    kernels = p.get("top_kernels") or []
    if not kernels or "error" in p:
        return []
    steps = p.get("profiled_steps") or 1
    lines = [f"  top kernels of {name} (per profiled step):"]
    lines += [
        f"  - {k['total_ms'] / steps:7.2f} ms  {k['count'] / steps:6.1f} launches  {k['name'][:90]}"
        for k in kernels
    ]
    return lines


def markdown(results: dict[str, Any]) -> str:
    """The suite as a short markdown block: the table, the matmul rate, the profiles."""
    args = results.get("args", {})
    matmul = results.get("matmul") or {}
    lines = [f"`{results.get('command', '')}`", ""]
    head = f"preset {args.get('preset')}, {args.get('batch_size')} samples per process, {args.get('nproc')} process(es)"
    env = results.get("environment") or {}
    if env:
        head += (
            f", {env.get('gpu') or env.get('cpu') or env.get('device')}, torch {env.get('torch')}"
        )
    if args.get("budget"):
        head += f", every row capped at {args['budget'] / GIB:.1f} GiB of device memory (--memory-budget)"
    lines += [head, ""]
    lines += [
        "| configuration | samples/s | step ms median | p10–p90 ms | peak GiB (allocated / reserved) | MFU (upstream / useful FLOPs) | × stock | parity (loss / grad-norm mean diff) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [_row(r) for r in rows(results)]
    if "error" in matmul:
        lines += ["", f"matmul rate: not measured ({matmul['error'][:150]})"]
    elif matmul:
        lines += [
            "",
            f"MFU: each row against the matmul rate measured in its own run (as a study's trials); "
            f"{matmul['tflops']:.4g} TFLOP/s ({matmul['dtype']} {matmul['n']}³ matmul on "
            f"{matmul['device']}) in a fresh process before the rows",
        ]
    profiles = results.get("profiles") or {}
    if profiles:
        lines += [""]
        for n, p in profiles.items():
            lines += [_profile_line(n, p), *_kernel_lines(n, p)]
    return "\n".join(lines)
