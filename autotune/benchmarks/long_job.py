"""The long job's cost on a GPU: checkpoints against none, and a resume against an uninterrupted run.

Three runs of ``autotune train`` with the same configuration, each in fresh processes:

* ``plain``: ``--max-steps N`` without checkpoints (the reference: its samples/s and its losses);
* ``saved``: the same N-step schedule with a checkpoint every K steps, stopped at step R
  (``--stop-at R``: the checkpoint of step R is written and the job exits);
* ``resumed``: the ``saved`` command again without ``--stop-at``: it resumes after step R and trains
  to N, checkpoints every K steps.

``saved`` and ``resumed`` together are the N steps with a checkpoint every K. The summary compares
their samples/s (summed over both: checkpoint stalls included) with ``plain``'s, gives each
checkpoint's size, stall at the step boundary and background write time, and checks the resumed
losses (steps R+1..N) against ``plain``'s same steps with :func:`autotune.train.verify.compare` at the
configuration's parity tolerance::

    python -m autotune.benchmarks.long_job --config reports/examples/full-1gpu-h200-v4/best.yaml \
        --steps 2000 --save-steps 500 --resume-at 1000 --out /tmp/longjob

The same on the CPU in a few minutes::

    python -m autotune.benchmarks.long_job --preset tiny --synthetic --steps 12 --save-steps 4 --resume-at 8 --out /tmp/lj

``--phases plain`` or ``--phases saved,resumed`` runs a part (the summary uses what ``--out`` holds);
``OUT/summary.json`` is rewritten after every phase and a markdown table printed at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from autotune.config import load_config
from autotune.config.stock import stock_config
from autotune.train.verify import compare, tolerance_for

PHASES = ("plain", "saved", "resumed")


def _command(args: argparse.Namespace, phase: str) -> list[str]:
    cmd = [sys.executable, "-m", "autotune", "train", "--max-steps", str(args.steps), "--log-steps", str(args.log_steps),
           "--no-progress", "--json", "--output-dir", str(args.out / ("plain" if phase == "plain" else "saved"))]
    cmd += ["--config", args.config] if args.config else ["--preset", args.preset]
    if args.synthetic:
        cmd.append("--synthetic")
    if phase != "plain":
        cmd += ["--save-steps", str(args.save_steps), "--save-total-limit", str(args.save_total_limit)]
    if phase == "saved":
        cmd += ["--stop-at", str(args.resume_at)]
    return cmd


def run_phase(args: argparse.Namespace, phase: str) -> dict[str, Any]:
    cmd = _command(args, phase)
    print("$ " + " ".join(cmd), flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"error": f"exit code {proc.returncode}", "wall_s": wall}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**result, "wall_s": wall}


def summarize(runs: dict[str, dict], tolerance: float, resume_at: int) -> dict[str, Any]:
    out: dict[str, Any] = {"phases": {p: {k: v for k, v in r.items() if k not in ("losses", "grad_norms")}
                                      for p, r in runs.items()}}
    plain, saved, resumed = (runs.get(p) for p in PHASES)
    ok = [r for r in (plain, saved, resumed) if r and "error" not in r]
    if plain in ok:
        out["plain_samples_per_s"] = plain["samples_per_s_overall"]
    if saved in ok and resumed in ok:
        steps = saved["steady_steps"] + resumed["steady_steps"]
        rate = None
        if steps:
            rate = saved["batch_size"] * saved["world_size"] * steps / (saved["steady_s"] + resumed["steady_s"])
        out["checkpointed_samples_per_s"] = rate
        if plain in ok and rate:
            out["checkpoint_cost"] = 1 - rate / plain["samples_per_s_overall"]
        records = saved["checkpoints"] + resumed["checkpoints"]
        out["checkpoints"] = records
        if records:
            out["checkpoint_gib"] = statistics.median(r["bytes"] for r in records) / 2**30
            out["snapshot_s_median"] = statistics.median(r["snapshot_s"] for r in records)
            out["write_s_median"] = statistics.median(r["write_s"] for r in records)
    if plain in ok and resumed in ok:
        ref = {"losses": plain["losses"][resume_at:], "grad_norms": plain["grad_norms"][resume_at:]}
        parity = compare(ref, {"losses": resumed["losses"], "grad_norms": resumed["grad_norms"]}, tolerance)
        first = min(50, parity.steps)
        out["resume"] = {"start_step": resumed["start_step"], "passed": parity.passed, "tolerance": tolerance,
                         "loss_rel_diff": parity.loss_rel_diff, "grad_norm_rel_diff": parity.grad_norm_rel_diff,
                         "steps": parity.steps,
                         f"loss_rel_diff_first_{first}": compare(
                             {k: v[:first] for k, v in ref.items()},
                             {"losses": resumed["losses"][:first], "grad_norms": resumed["grad_norms"][:first]},
                             tolerance).loss_rel_diff}
    return out


def markdown(s: dict[str, Any]) -> str:
    def f(x, spec=".1f"):
        return "-" if x is None else format(x, spec)

    lines = ["| measure | value |", "|---|---|",
             f"| samples/s without checkpoints | {f(s.get('plain_samples_per_s'))} |",
             f"| samples/s with checkpoints (stalls included) | {f(s.get('checkpointed_samples_per_s'))} |",
             f"| checkpoint cost | {f(100 * s['checkpoint_cost'] if 'checkpoint_cost' in s else None, '.2f')} % |",
             f"| one checkpoint | {f(s.get('checkpoint_gib'), '.2f')} GiB, stall {f(s.get('snapshot_s_median'), '.2f')} s, "
             f"written in {f(s.get('write_s_median'), '.1f')} s in the background |"]
    r = s.get("resume")
    if r:
        lines.append(f"| resume at step {r['start_step'] - 1}: loss / grad-norm mean vs uninterrupted | "
                     f"{100 * r['loss_rel_diff']:.2f} % / {100 * r['grad_norm_rel_diff']:.2f} % over {r['steps']} steps "
                     f"(tolerance {100 * r['tolerance']:.0f} %): {'PASS' if r['passed'] else 'FAIL'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--synthetic", action="store_true")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--save-steps", type=int, default=500)
    ap.add_argument("--save-total-limit", type=int, default=1)
    ap.add_argument("--resume-at", type=int, default=1000)
    ap.add_argument("--log-steps", type=int, default=50)
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(args.config) if args.config else stock_config(preset=args.preset)
    runs_path = args.out / "runs.json"
    runs = json.loads(runs_path.read_text()) if runs_path.exists() else {}
    for phase in args.phases.split(","):
        runs[phase] = run_phase(args, phase)
        runs_path.write_text(json.dumps(runs))
        summary = summarize(runs, tolerance_for(cfg), args.resume_at)
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(markdown(summary))
    return 0 if all("error" not in r for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
