"""How much a study's compile cache saves a run that compiles what an earlier run compiled.

Commands (CPU: the tiny preset; on a GPU machine: the preset to tune)::

    python -m autotune.benchmarks.compile_cache --preset tiny --rounds 2
    python -m autotune.benchmarks.compile_cache --preset full --set 'compile.regions=[all],graphs.mode=step' \\
        --rounds 2 --json compile-cache.json

Every run is a fresh process started as a study starts its trials (:func:`autotune.train.trial.launch.launch`),
the stock configuration with ``--set``'s changes and synthetic batches. A round is a *cold* run
with an empty cache folder (:func:`autotune.train.compile_cache.cache_env`) and then a *warm* run
of the same configuration with the folder the cold one filled, as a later trial of a study (or the
confirmation of its winner) finds it. Each round has a folder of its own. Reported per run: wall
time, its compile and capture parts (:mod:`autotune.train.window.cost`) and the caches' hit and miss
counts; then the medians of the cold and warm runs and what the cache saved.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from autotune.benchmarks._output import json_target, write_json
from autotune.errors import AutotuneError
from autotune.train.compile_cache import cache_env


def config(preset: str, changes: str, batch_size: int | None):
    from autotune.config.stock import stock_config
    from autotune.search.references import reference_config

    cfg = reference_config(stock_config("gr00t_n16", preset), changes, flag="--set")
    cfg.data.source = "synthetic"
    cfg.batch_size = batch_size or (2 if preset == "tiny" else cfg.batch_size)
    return cfg


def run_once(
    cfg, folder: Path, steps: int, warmup: int, timeout: float, log: Path
) -> dict[str, Any]:
    from autotune.train.trial.launch import launch

    record = launch(
        cfg,
        steps=steps,
        warmup=warmup,
        timeout=timeout,
        log_path=log,
        extra_env=cache_env(folder, keep_user=False),
        read_host=False,
    )
    if record.failure is not None:
        return {"error": f"{record.failure.reason}: {record.failure.error[:300]}", "log": str(log)}
    parts = record.cost.parts
    return {
        "wall_s": record.cost.wall_s,
        "compile_s": parts.get("compile", 0.0),
        "capture_s": parts.get("capture", 0.0),
        "parts": parts,
        "cache": record.cost.compile_cache,
        "samples_per_s": record.measurement.samples_per_s if record.measurement else None,
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the cold and the warm runs, and the saving (cold minus warm) of compile and wall time."""
    out: dict[str, Any] = {}
    for kind in ("cold", "warm"):
        ok = [r for r in runs if r["kind"] == kind and "error" not in r]
        for key in ("wall_s", "compile_s"):
            out[f"{kind}_{key}"] = statistics.median(r[key] for r in ok) if ok else None
    for key in ("wall_s", "compile_s"):
        cold, warm = out[f"cold_{key}"], out[f"warm_{key}"]
        out[f"saved_{key}"] = cold - warm if cold is not None and warm is not None else None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m autotune.benchmarks.compile_cache", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--preset", default="tiny")
    ap.add_argument(
        "--set",
        default="compile.regions=[all]",
        metavar="KEY=VALUE,...",
        help="changes to the stock configuration (default: compile.regions=[all])",
    )
    ap.add_argument(
        "--rounds", type=int, default=2, help="cold-then-warm pairs, each with a fresh cache folder"
    )
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds before a run is killed")
    ap.add_argument("--json", default=None, help="write the runs and the summary to this file")
    args = ap.parse_args(argv)
    try:
        json_path = json_target(args.json)
        cfg = config(args.preset, args.set, args.batch_size)
    except AutotuneError as exc:
        print(f"compile_cache: error: {exc}", file=sys.stderr)
        return exc.exit_code
    runs = []
    with tempfile.TemporaryDirectory(prefix="autotune-cache-bench-") as tmp:
        for r in range(args.rounds):
            folder = Path(tmp) / f"cache-{r}"
            for kind in ("cold", "warm"):
                run = {
                    "round": r + 1,
                    "kind": kind,
                    **run_once(
                        cfg,
                        folder,
                        args.steps,
                        args.warmup,
                        args.timeout,
                        Path(tmp) / f"{kind}-{r}.log",
                    ),
                }
                runs.append(run)
                print(line(run), flush=True)
    result = {
        "preset": args.preset,
        "set": args.set,
        "steps": args.steps,
        "warmup": args.warmup,
        "runs": runs,
        "summary": summary(runs),
    }
    s = result["summary"]
    if s["saved_wall_s"] is not None:
        print(
            f"median cold: {s['cold_wall_s']:.1f} s a run ({s['cold_compile_s']:.1f} s compiling); warm: "
            f"{s['warm_wall_s']:.1f} s ({s['warm_compile_s']:.1f} s); the cache saved {s['saved_wall_s']:.1f} s a run "
            f"({s['saved_compile_s']:.1f} s of compiling)"
        )
    write_json(json_path, json.dumps(result, indent=1))
    return 0 if s["saved_wall_s"] is not None else 1


def line(run: dict[str, Any]) -> str:
    head = f"round {run['round']} {run['kind']}:"
    if "error" in run:
        return f"{head} failed ({run['error']}), log {run['log']}"
    hits = {k: v for k, v in run["cache"].items() if v}
    return (
        f"{head} {run['wall_s']:.1f} s, compile {run['compile_s']:.1f} s, capture {run['capture_s']:.1f} s, "
        f"{run['samples_per_s']:.2f} samples/s, cache {hits or 'no counts'}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
