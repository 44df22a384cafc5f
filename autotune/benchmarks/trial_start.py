"""How long a trial takes to start: executed from scratch against forked from a warm zygote.

Commands (CPU: the tiny preset; on a GPU machine the preset to tune)::

    python -m autotune.benchmarks.trial_start --preset tiny --runs 4
    python -m autotune.benchmarks.trial_start --preset full --runs 3 --json trial-start.json

Each run is a trial as a study starts it (:func:`autotune.train.trial.launch.launch`): the stock
configuration with synthetic batches, one measured step. The two ways alternate run by run
(executed, forked, executed, ...) in one process; the first forked run starts the zygote and is
reported apart (``zygote_start``), the others are forks from it. Reported per run: its wall time
and the ``start`` part of its cost (from the launch to the worker's first line); then the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from typing import Any


def config(preset: str, batch_size: int | None):
    from autotune.config.stock import stock_config

    cfg = stock_config("gr00t_n16", preset)
    cfg.data.source = "synthetic"
    cfg.batch_size = batch_size or (2 if preset == "tiny" else cfg.batch_size)
    return cfg


def run_once(cfg, forked: bool, timeout: float) -> dict[str, Any]:
    from autotune.train.trial import zygote_client
    from autotune.train.trial.launch import launch

    os.environ[zygote_client.ENABLE_ENV] = "1" if forked else "0"
    record = launch(cfg, steps=1, warmup=0, timeout=timeout, read_host=False)
    if not record.ok:
        raise SystemExit(f"a run failed: {record.failure.reason}: {record.failure.error}")
    return {
        "way": "forked" if forked else "executed",
        "wall_s": record.cost.wall_s,
        "start_s": record.cost.parts.get("start", 0.0),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument(
        "--runs", type=int, default=4, help="runs of each way (the forked ones after the zygote's)"
    )
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--json", default=None, help="write the runs and medians here")
    args = ap.parse_args(argv)
    cfg = config(args.preset, args.batch_size)
    runs = [dict(run_once(cfg, True, args.timeout), way="zygote_start")]
    for _ in range(args.runs):
        runs += [run_once(cfg, False, args.timeout), run_once(cfg, True, args.timeout)]
    for r in runs:
        print(f"{r['way']:>12}: start {r['start_s']:6.2f} s, wall {r['wall_s']:6.2f} s")
    medians = {
        way: {
            k: statistics.median(r[k] for r in runs if r["way"] == way)
            for k in ("start_s", "wall_s")
        }
        for way in ("executed", "forked")
    }
    for way, m in medians.items():
        print(f"median {way}: start {m['start_s']:.2f} s, wall {m['wall_s']:.2f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"preset": args.preset, "runs": runs, "medians": medians}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
