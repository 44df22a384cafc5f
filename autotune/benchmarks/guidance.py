"""Profile-guided vs unguided search: trials to reach a fraction of the best.

    OMP_NUM_THREADS=1 python -m autotune.benchmarks.guidance --seeds 0 1 2 \\
        --trials 8 --space cpu_bench --preset tiny --batch-size 8 --out /tmp/guidance --json guidance.json
    python -m autotune.benchmarks.guidance --from-json guidance.json --fractions 0.8 0.9 0.95  # re-summarize

For each sampler seed the same ``autotune run`` study is made twice, with profile guidance and
with ``--no-guidance`` (the same TPE sampler over all knobs from the start), each in its own run
folder and fresh processes; the order of the two alternates from seed to seed, so a drift in the
machine's load does not always fall on the same mode. Then, against one common reference — the
best feasible samples/s seen in ANY study of the benchmark — each study's *trials to X %* is the
1-based number of the first trial after which its best-so-far reaches X % of the reference
(every trial counts: stock, pruned and failed ones too); ``None`` when it never does. Medians
over seeds count a study that never got there as ``trials + 1``.

Without ``--prune`` trials run to the end (``--no-prune``): on a shared, noisy machine the pruner
can stop a fast configuration on two slow steps, which would measure the pruner, not the guide.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MODES = ("guided", "unguided")


@dataclass
class StudyRun:
    """One study of the benchmark: its values in trial order (None: not feasible) and its wall time."""

    seed: int
    mode: str
    folder: str
    wall_s: float
    values: list[float | None]
    stages: list[str] = field(default_factory=list)
    """``bottleneck -> group`` of each guided stage, in order."""
    trials_to: dict[str, int | None] = field(default_factory=dict)
    loadavg: list[float] = field(default_factory=list)
    """1-minute load average at the start and at the end of the study (other jobs on the machine)."""


def trials_to_fraction(values: list[float | None], reference: float, fraction: float) -> int | None:
    """1-based trial after which the best-so-far first reaches ``fraction * reference``; None: never."""
    best = float("-inf")
    for i, value in enumerate(values, 1):
        if value is not None:
            best = max(best, value)
        if best >= fraction * reference:
            return i
    return None


def study_values(folder: Path) -> tuple[list[float | None], list[str]]:
    """Values of the study in ``folder`` (its one journal study) in trial order, and its guide's stages."""
    import optuna

    from autotune.search.guide import STUDY_ATTR
    from autotune.search.storage import open_storage
    from autotune.search.trials import feasible

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=None, storage=open_storage(None, folder))
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    values = [float(t.value) if feasible(t) else None for t in trials]
    stages = [
        f"{s['bottleneck'] or 'free'} -> {'+'.join(s['groups'])}"
        for s in json.loads(study.user_attrs.get(STUDY_ATTR) or "[]")
    ]
    return values, stages


def summarize(runs: list[StudyRun], fractions: list[float], trials: int) -> dict[str, Any]:
    """Fill each run's ``trials_to`` against the common reference; medians and ranges per mode."""
    feasible = [v for r in runs for v in r.values if v is not None]
    if not feasible:
        return {"reference_samples_per_s": None, "modes": {}}
    reference = max(feasible)
    for run in runs:
        run.trials_to = {
            f"{f:.0%}": trials_to_fraction(run.values, reference, f) for f in fractions
        }
    modes: dict[str, Any] = {}
    for mode in MODES:
        mine = [r for r in runs if r.mode == mode]
        if not mine:
            continue
        row: dict[str, Any] = {
            "studies": len(mine),
            "wall_s_median": statistics.median(r.wall_s for r in mine),
            "best_median": statistics.median(
                max((v for v in r.values if v is not None), default=0.0) for r in mine
            ),
        }
        for key in mine[0].trials_to:
            counts = [r.trials_to[key] for r in mine]
            row[f"trials_to_{key}"] = counts
            row[f"median_to_{key}"] = statistics.median(
                trials + 1 if c is None else c for c in counts
            )
            row[f"reached_{key}"] = sum(c is not None for c in counts)
        modes[mode] = row
    return {"reference_samples_per_s": reference, "modes": modes}


def run_study(args: argparse.Namespace, seed: int, mode: str) -> StudyRun:
    folder = Path(args.out) / f"seed{seed}-{mode}"
    cmd = [
        sys.executable,
        "-m",
        "autotune",
        "run",
        "--space",
        args.space,
        "--preset",
        args.preset,
        "--trials",
        str(args.trials),
        "--seed",
        str(seed),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--stage-trials",
        str(args.stage_trials),
        "--nproc",
        str(args.nproc),
        "--out",
        str(folder),
        # the same number of trials in both modes, and no re-measuring: the studies' own numbers are compared
        "--converge-after",
        "0",
        "--confirm-rounds",
        "0",
    ]
    cmd += ["--batch-size", str(args.batch_size)] if args.batch_size else []
    cmd += ["--base", args.base] if args.base else []
    cmd += ["--synthetic"] if args.synthetic else []
    cmd += [] if args.prune else ["--no-prune"]
    cmd += ["--no-guidance"] if mode == "unguided" else []
    print(f"[seed {seed} {mode}] {' '.join(cmd[1:])}", flush=True)
    load, start = os.getloadavg()[0], time.monotonic()
    with open(folder.with_suffix(".log"), "w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True)
    wall = time.monotonic() - start
    values, stages = study_values(folder)
    return StudyRun(
        seed=seed,
        mode=mode,
        folder=str(folder),
        wall_s=wall,
        values=values,
        stages=stages if mode == "guided" else [],
        loadavg=[load, os.getloadavg()[0]],
    )


def table(result: dict[str, Any]) -> str:
    """The markdown table of the summary, one row per mode."""
    modes = result["summary"]["modes"]
    keys = [
        k[len("median_to_") :] for k in next(iter(modes.values())) if k.startswith("median_to_")
    ]
    head = [
        "mode",
        *[f"trials to {k} (per seed; median)" for k in keys],
        "best samples/s (median)",
        "wall s (median)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for mode, row in modes.items():
        cells = [
            ", ".join("–" if c is None else str(c) for c in row[f"trials_to_{k}"])
            + f"; **{row[f'median_to_{k}']:g}**"
            for k in keys
        ]
        lines.append(
            f"| {mode} | "
            + " | ".join(cells)
            + f" | {row['best_median']:.1f} | {row['wall_s_median']:.0f} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m autotune.benchmarks.guidance", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0, 1, 2],
        help="sampler seeds (one guided + one unguided study each)",
    )
    p.add_argument("--trials", type=int, default=8, help="trials per study, the stock one included")
    p.add_argument("--space", default="cpu_bench", help="search space name or YAML path")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument(
        "--base",
        default=None,
        help="starting configuration of every study (autotune run --base), "
        "e.g. autotune/benchmarks/bases/tiny_data_bound.yaml",
    )
    p.add_argument("--steps", type=int, default=6, help="measured steps per trial")
    p.add_argument("--warmup", type=int, default=2, help="warm-up steps per trial")
    p.add_argument("--stage-trials", type=int, default=2, help="trials per guided stage")
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument(
        "--synthetic", action="store_true", help="synthetic batches (default: the real data path)"
    )
    p.add_argument(
        "--prune",
        action="store_true",
        help="let the pruner stop trials (default: every trial runs to its end)",
    )
    p.add_argument("--fractions", type=float, nargs="+", default=[0.90, 0.95])
    p.add_argument(
        "--out", default="runs/guidance", help="folder of the studies (one run folder each)"
    )
    p.add_argument("--json", default=None, help="write the result object here")
    p.add_argument(
        "--from-json",
        default=None,
        metavar="FILE",
        help="run nothing: summarize the studies of an earlier --json again (e.g. with other --fractions)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from autotune.benchmarks.loader import machine

    result: dict[str, Any]
    args = parse_args(argv)
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text())
        runs = [StudyRun(**{**r, "trials_to": {}}) for r in result["studies"]]
        trials = result["args"]["trials"]
    else:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        result = {
            "args": vars(args),
            "machine": machine(),
            "commit": _commit(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        }
        runs = [
            run_study(args, seed, mode)
            for i, seed in enumerate(args.seeds)
            for mode in (MODES if i % 2 == 0 else MODES[::-1])
        ]
        result["machine"]["loadavg_at_end"] = list(os.getloadavg())
        trials = args.trials
    result["summary"] = summarize(runs, args.fractions, trials)
    result["studies"] = [asdict(r) for r in runs]
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    for r in runs:
        shown = ", ".join("–" if v is None else f"{v:.1f}" for v in r.values)
        print(
            f"seed {r.seed} {r.mode:8s} {r.wall_s:5.0f} s  trials_to {r.trials_to}  values [{shown}]  {r.stages}"
        )
    print(f"reference (best of all studies): {result['summary']['reference_samples_per_s']}")
    if result["summary"]["modes"]:
        print(table(result))
    return 0


def _commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


if __name__ == "__main__":
    raise SystemExit(main())
