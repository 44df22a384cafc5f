"""What profiling costs a training step, for each detail of the profiling window.

Commands (CPU: the tiny preset; on a GPU machine: the preset to tune)::

    python -m autotune.benchmarks.profiler_overhead --preset tiny --details ops,spans --rounds 3
    python -m autotune.benchmarks.profiler_overhead --preset full --details ops,spans --rounds 3 --json overhead.json

Each (detail, round) runs in a fresh process, as the tuner profiles (one window per process,
:mod:`autotune.profiling.window`): the workload's stock configuration with synthetic batches
(no loader, so that a data stall cannot pass for profiler overhead), ``--warmup`` steps, then
``profile_window(detail=...)``, which times ``--active`` profiled steps and as many unprofiled
ones in the same process. Rounds alternate the order of the details. Reported per detail: the
median profiled and unprofiled step times over all rounds, the overhead (their ratio minus
one), the trace's events per step by category and its JSON size, and the classifier's
dominant bucket (a CPU-only ``spans`` trace cannot be classified: it holds no operators).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from autotune.profiling.detail import DETAILS


def _child(
    preset: str, detail: str, out: str, warmup: int, active: int, batch_size: int | None
) -> dict:
    """One window in this process; returns what it measured."""
    from autotune.config.stock import stock_config
    from autotune.errors import AutotuneError
    from autotune.profiling import classify, data_wait, load_trace, profile_window
    from autotune.profiling.kinds import Category
    from autotune.train.session import Session

    cfg = stock_config("gr00t_n16", preset)
    cfg.data.source = "synthetic"
    cfg.batch_size = batch_size or (2 if preset == "tiny" else cfg.batch_size)
    session = Session(cfg)
    loader = session.workload.make_loader(cfg.preset, cfg.data, cfg.batch_size, seed=cfg.seed)
    batches = session.batches(loader)

    def step() -> None:
        with data_wait():
            batch = next(batches)
        session.step(batch)

    for _ in range(warmup):
        step()
    window = profile_window(
        step, out_dir=out, wait=1, warmup=1, active=active, unprofiled_steps=active, detail=detail
    )
    trace = load_trace(window.trace_path)
    counts = Counter(Category(c).name.lower() for c in trace.host.category)
    counts["device"] = len(trace.device)
    try:
        dominant = classify(out).dominant
    except AutotuneError as exc:
        dominant = f"not classified ({exc})"
    return {
        "detail": window.detail,
        "profiled_ms": window.profiled_step_ms,
        "unprofiled_ms": window.unprofiled_step_ms,
        "events_per_step": {k: v // active for k, v in sorted(counts.items())},
        "json_mb": len(_text(window.trace_path)) / 1e6,
        "dominant": dominant,
    }


def _text(path: Path) -> bytes:
    import gzip

    return gzip.decompress(path.read_bytes())


def _run(args: argparse.Namespace, detail: str, folder: Path) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "autotune.benchmarks.profiler_overhead",
        "--child",
        detail,
        "--preset",
        args.preset,
        "--warmup",
        str(args.warmup),
        "--active",
        str(args.active),
        "--out",
        str(folder),
    ]
    if args.batch_size:
        cmd += ["--batch-size", str(args.batch_size)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"]
        return {"detail": detail, "error": lines[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _summary(runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": runs[0]["error"]}
    profiled = statistics.median(r["profiled_ms"] for r in ok)
    unprofiled = statistics.median(r["unprofiled_ms"] for r in ok)
    return {
        "profiled_ms": profiled,
        "unprofiled_ms": unprofiled,
        "overhead": profiled / unprofiled - 1.0,
        "rounds": [(round(r["profiled_ms"], 2), round(r["unprofiled_ms"], 2)) for r in ok],
        "events_per_step": ok[0]["events_per_step"],
        "json_mb": ok[0]["json_mb"],
        "dominant": ok[0]["dominant"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m autotune.benchmarks.profiler_overhead", description=__doc__.split("\n")[0]
    )
    p.add_argument("--preset", default="tiny")
    p.add_argument("--details", default="ops,spans", help=f"comma-separated, of {list(DETAILS)}")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument(
        "--active", type=int, default=5, help="profiled steps (and as many unprofiled) per window"
    )
    p.add_argument("--batch-size", type=int)
    p.add_argument("--json", type=Path, help="also write the report to this file")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(
            json.dumps(
                _child(args.preset, args.child, args.out, args.warmup, args.active, args.batch_size)
            )
        )
        return 0
    details = args.details.split(",")
    runs: dict[str, list[dict]] = {d: [] for d in details}
    with tempfile.TemporaryDirectory(prefix="overhead-") as tmp:
        for r in range(args.rounds):
            for d in details if r % 2 == 0 else details[::-1]:
                runs[d].append(_run(args, d, Path(tmp, f"{d}-{r}")))
    report = {
        "preset": args.preset,
        "active": args.active,
        "details": {d: _summary(runs[d]) for d in details},
    }
    text = json.dumps(report, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    return 0 if all("error" not in s for s in report["details"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
