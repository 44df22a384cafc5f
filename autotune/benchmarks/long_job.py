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
losses (steps R+1..N) against ``plain``'s same steps with :func:`autotune.train.window.verify.compare` at the
configuration's parity tolerance::

    python -m autotune.benchmarks.long_job --config runs/x/best.yaml \
        --steps 2000 --save-steps 500 --resume-at 1000 --out /tmp/longjob

The same on the CPU in a minute or two::

    python -m autotune.benchmarks.long_job --preset tiny --synthetic --steps 12 --save-steps 4 --resume-at 8 --out /tmp/lj

The jobs' folders (``plain/``, ``saved/``: checkpoints, ``metrics.jsonl``, ``tensorboard/``) go
into ``--jobs-dir`` (default ``--out``): on a GPU machine whose ``$OUT`` comes back, give
``--out $OUT/lj --jobs-dir /tmp/lj`` so that the summary comes back and the checkpoints (19 GB each
for ``full``) stay on the machine's disk. ``plain`` and ``saved`` start from empty folders (a
folder of an earlier invocation is removed first; one that no job wrote is refused, never removed). ``--phases plain`` or ``--phases saved,resumed``
runs a part (the summary uses what ``OUT/runs.json`` holds); ``OUT/summary.json`` and each phase's
``OUT/metrics-<phase>.jsonl`` are written after every phase, so a call cut short keeps what it
measured, and a markdown table is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from autotune.argtypes import POSITIVE
from autotune.boundedread import read_json
from autotune.config import load_config
from autotune.config.stock import stock_config
from autotune.errors import AutotuneError, ConfigError
from autotune.train.window.verify import compare, tolerance_for

PHASES = ("plain", "saved", "resumed")


def _job_dir(args: argparse.Namespace, phase: str) -> Path:
    return args.jobs_dir / ("plain" if phase == "plain" else "saved")


def _command(args: argparse.Namespace, phase: str) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "autotune",
        "train",
        "--max-steps",
        str(args.steps),
        "--log-steps",
        str(args.log_steps),
        "--no-progress",
        "--json",
        "--output-dir",
        str(_job_dir(args, phase)),
    ]
    cmd += ["--config", args.config] if args.config else ["--preset", args.preset]
    if args.synthetic:
        cmd.append("--synthetic")
    if phase != "plain":
        cmd += [
            "--save-steps",
            str(args.save_steps),
            "--save-total-limit",
            str(args.save_total_limit),
        ]
    if phase == "saved":
        cmd += ["--stop-at", str(args.resume_at)]
    return cmd


def _not_removable(args: argparse.Namespace, phases: list[str]) -> str | None:
    """Why a phase that starts afresh cannot remove its folder (one of the user's is there), or None."""
    from autotune.train.job.folder import removable_as_a_jobs

    for phase in ("plain", "saved"):
        folder = _job_dir(args, phase)
        if phase in phases and not removable_as_a_jobs(folder):
            return (
                f"--jobs-dir {args.jobs_dir}: {folder} holds files of no autotune job, which a fresh "
                "run would delete; give another --jobs-dir (a new or empty folder)"
            )
    return None


def run_phase(args: argparse.Namespace, phase: str) -> dict[str, Any]:
    folder = _job_dir(args, phase)
    if phase in ("plain", "saved"):  # a fresh run: nothing of an earlier invocation to resume from
        shutil.rmtree(folder, ignore_errors=True)
    cmd = _command(args, phase)
    print("$ " + " ".join(cmd), flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if (
        folder / "metrics.jsonl"
    ).exists():  # the resumed phase's holds the saved phase's steps before its own
        shutil.copyfile(folder / "metrics.jsonl", args.out / f"metrics-{phase}.jsonl")
    if proc.returncode != 0:
        return {"error": f"exit code {proc.returncode}", "wall_s": wall}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**result, "wall_s": wall}


def _trained(run: dict[str, Any], lo: int = 0, hi: int | None = None) -> SimpleNamespace:
    """A run's losses and gradient norms (``compare`` reads them as attributes), steps ``lo+1..hi``
    of the ones it trained."""
    return SimpleNamespace(losses=run["losses"][lo:hi], grad_norms=run["grad_norms"][lo:hi])


def summarize(runs: dict[str, dict], tolerance: float, resume_at: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "phases": {
            p: {k: v for k, v in r.items() if k not in ("losses", "grad_norms")}
            for p, r in runs.items()
        }
    }
    plain, saved, resumed = (runs.get(p) for p in PHASES)
    ok = [r for r in (plain, saved, resumed) if r and "error" not in r]
    if plain in ok:
        out["plain_samples_per_s"] = plain["samples_per_s_overall"]
    if saved in ok and resumed in ok:
        steps = saved["steady_steps"] + resumed["steady_steps"]
        seconds = saved["steady_s"] + resumed["steady_s"]
        rate = saved["batch_size"] * saved["world_size"] * steps / seconds if steps else None
        out["checkpointed_samples_per_s"] = rate
        records = saved["checkpoints"] + resumed["checkpoints"]
        # A checkpoint at a phase's last step (--stop-at, the end) stalls and writes after its timed
        # steps; the others' stalls and background writes fall inside them.
        inside = [
            r["step"]
            for run in (saved, resumed)
            for r in run["checkpoints"]
            if r["step"] != run["final_step"]
        ]
        out["checkpoints_inside_timed_steps"] = inside
        if plain in ok and rate and plain["steady_steps"]:
            out["checkpoint_cost"] = 1 - rate / plain["samples_per_s_overall"]
            if inside:  # the timed steps' extra seconds against plain's mean step, per checkpoint among them
                extra = seconds - steps * plain["steady_s"] / plain["steady_steps"]
                out["seconds_per_checkpoint"] = extra / len(inside)
        # The same cost measured inside the checkpointing runs, against their own median step: the extra
        # time of their timed steps over steps x median (independent of the machine plain ran on; plain's
        # own figure is the jitter of steps without checkpoints)
        median_s = sum(
            r["steady_steps"] * r["batch_size"] * r["world_size"] / r["samples_per_s"]
            for r in (saved, resumed)
            if r["samples_per_s"]
        )
        out["checkpoint_cost_in_run"] = 1 - median_s / seconds if seconds else None
        if plain in ok and plain["samples_per_s"] and plain["steady_s"]:
            out["plain_cost_in_run"] = 1 - plain["samples_per_s_overall"] / plain["samples_per_s"]
        out["checkpoints"] = records
        if records:
            out["checkpoint_gib"] = statistics.median(r["bytes"] for r in records) / 2**30
            out["snapshot_s_median"] = statistics.median(r["snapshot_s"] for r in records)
            out["write_s_median"] = statistics.median(r["write_s"] for r in records)
            # a process allocates (page-locks) its checkpoints' host buffers after its first step, outside
            # the timed steps (``host_buffers_s``); a first checkpoint slower than the later ones says it did not
            buffers = [
                run["host_buffers_s"]
                for run in (saved, resumed)
                if run.get("host_buffers_s") is not None
            ]
            out["host_buffers_s"] = statistics.median(buffers) if buffers else None
            firsts = [
                run["checkpoints"][0]["snapshot_s"]
                for run in (saved, resumed)
                if run["checkpoints"]
            ]
            later = [r["snapshot_s"] for run in (saved, resumed) for r in run["checkpoints"][1:]]
            out["snapshot_s_first"] = statistics.median(firsts)
            out["snapshot_s_later"] = statistics.median(later) if later else None
    if (
        plain in ok and saved in ok
    ):  # the same steps 1..R before the stop: the run-to-run noise of the device
        same = compare(_trained(plain, 0, resume_at), _trained(saved), tolerance)
        out["saved_vs_plain"] = {
            "steps": same.steps,
            "loss_rel_diff": same.loss_rel_diff,
            "max_step_loss_rel_diff": same.max_step_loss_rel_diff,
            "identical": saved["losses"] == plain["losses"][:resume_at],
        }
        # the same over the later half: the noise at a loss level closer to the resumed steps' (on an H200,
        # two runs of the same schedule differed by 1.4 % over steps 1-1000 and by 3-6 % in 50-step windows
        # past step 500: bf16 kernels are not bit-reproducible and the runs drift apart)
        half = resume_at // 2
        late = compare(_trained(plain, half, resume_at), _trained(saved, half), tolerance)
        out["saved_vs_plain"]["late"] = {
            "steps": f"{half + 1}-{resume_at}",
            "loss_rel_diff": late.loss_rel_diff,
            "grad_norm_rel_diff": late.grad_norm_rel_diff,
        }
    if plain in ok and resumed in ok:
        parity = compare(_trained(plain, resume_at), _trained(resumed), tolerance)
        first = min(50, parity.steps)
        head = compare(
            _trained(plain, resume_at, resume_at + first), _trained(resumed, 0, first), tolerance
        )
        out["resume"] = {
            "start_step": resumed["start_step"],
            "passed": parity.passed,
            "tolerance": tolerance,
            "loss_rel_diff": parity.loss_rel_diff,
            "grad_norm_rel_diff": parity.grad_norm_rel_diff,
            "max_step_loss_rel_diff": parity.max_step_loss_rel_diff,
            "steps": parity.steps,
            "identical": resumed["losses"] == plain["losses"][resume_at:],
            f"loss_rel_diff_first_{first}": head.loss_rel_diff,
            f"max_step_loss_rel_diff_first_{first}": head.max_step_loss_rel_diff,
        }
    return out


def markdown(s: dict[str, Any]) -> str:
    def f(x, spec=".1f"):
        return "-" if x is None else format(x, spec)

    cost = s.get("checkpoint_cost")
    lines = [
        "| measure | value |",
        "|---|---|",
        f"| samples/s without checkpoints | {f(s.get('plain_samples_per_s'))} |",
        f"| samples/s with checkpoints (stalls included) | {f(s.get('checkpointed_samples_per_s'))} |",
        f"| checkpoint cost | {f(100 * cost if cost is not None else None, '.2f')} % "
        f"({f(s.get('seconds_per_checkpoint'), '.2f')} s a checkpoint, from those at steps "
        f"{s.get('checkpoints_inside_timed_steps', '-')}) |",
        f"| checkpoint cost inside the checkpointing runs (their extra time over steps x median step) | "
        f"{f(100 * s['checkpoint_cost_in_run'] if s.get('checkpoint_cost_in_run') is not None else None, '.2f')} % "
        f"(plain's, no checkpoints: {f(100 * s['plain_cost_in_run'] if 'plain_cost_in_run' in s else None, '.2f')} %) |",
        f"| one checkpoint | {f(s.get('checkpoint_gib'), '.2f')} GiB, stall {f(s.get('snapshot_s_median'), '.2f')} s "
        f"(a process's first {f(s.get('snapshot_s_first'), '.2f')} s, later {f(s.get('snapshot_s_later'), '.2f')} s), "
        f"written in {f(s.get('write_s_median'), '.1f')} s in the background; its host buffers allocated once "
        f"after a process's first step in {f(s.get('host_buffers_s'), '.2f')} s |",
    ]
    same = s.get("saved_vs_plain")
    if same:
        lines.append(
            f"| steps 1-{same['steps']}, the same schedule run twice: loss mean / largest step | "
            f"{100 * same['loss_rel_diff']:.2f} % / {100 * same['max_step_loss_rel_diff']:.2f} %"
            f"{' (identical)' if same['identical'] else ''}; steps {same['late']['steps']}: "
            f"{100 * same['late']['loss_rel_diff']:.2f} % |"
        )
    r = s.get("resume")
    if r:
        lines.append(
            f"| resume at step {r['start_step'] - 1}: loss / grad-norm mean vs uninterrupted | "
            f"{100 * r['loss_rel_diff']:.2f} % / {100 * r['grad_norm_rel_diff']:.2f} % over {r['steps']} steps, "
            f"largest step {100 * r['max_step_loss_rel_diff']:.2f} %{' (identical)' if r['identical'] else ''} "
            f"(tolerance {100 * r['tolerance']:.0f} %): {'PASS' if r['passed'] else 'FAIL'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--synthetic", action="store_true")
    ap.add_argument("--steps", type=POSITIVE, default=2000)
    ap.add_argument("--save-steps", type=POSITIVE, default=500)
    ap.add_argument("--save-total-limit", type=POSITIVE, default=1)
    ap.add_argument("--resume-at", type=POSITIVE, default=1000)
    ap.add_argument("--log-steps", type=POSITIVE, default=50)
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument(
        "--out", type=Path, required=True, help="runs.json, summary.json, metrics-<phase>.jsonl"
    )
    ap.add_argument(
        "--jobs-dir", type=Path, help="the jobs' output folders plain/ and saved/ (default: --out)"
    )
    ap.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        metavar="RUNS_JSON",
        help="train nothing: summarize the phases of these runs.json files (later ones win), e.g. "
        "plain from one device call and saved,resumed from another",
    )
    args = ap.parse_args(argv)
    try:
        return _main(ap, args, argv)
    except AutotuneError as exc:
        print(f"long_job: error: {exc}", file=sys.stderr)
        return exc.exit_code


def _read_runs(path: Path) -> dict[str, Any]:
    """A runs.json of an earlier invocation (``--merge``), or one line saying why it is not one."""
    try:
        runs = read_json(path, error=ConfigError)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except (OSError, ValueError):  # a folder, no permission, not UTF-8, not JSON
        runs = None
    if not isinstance(runs, dict):
        raise ConfigError(f"{path}: not a runs.json (a JSON mapping of phase -> run)")
    return runs


def _main(ap: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str] | None) -> int:
    phases = args.phases.split(",")
    unknown = sorted(set(phases) - set(PHASES))
    if unknown:
        ap.error(f"--phases: {unknown} unknown; allowed: {','.join(PHASES)}")
    if not 0 < args.resume_at < args.steps:
        ap.error(f"--resume-at {args.resume_at} must lie inside 1..{args.steps - 1}")
    args.jobs_dir = args.jobs_dir or args.out
    if not args.merge and (error := _not_removable(args, phases)):
        print(f"long_job: error: {error}", file=sys.stderr)
        return 2
    cfg = load_config(args.config) if args.config else stock_config(preset=args.preset)
    merged = [_read_runs(path) for path in args.merge or []]
    args.out.mkdir(parents=True, exist_ok=True)
    args.jobs_dir.mkdir(parents=True, exist_ok=True)
    runs_path = args.out / "runs.json"
    if args.merge:
        runs = {}
        for earlier in merged:
            runs.update(earlier)
        phases = []
    else:  # every phase asked for: a new measurement; a part: added to what the earlier invocation measured
        runs = (
            json.loads(runs_path.read_text())
            if runs_path.exists() and set(phases) != set(PHASES)
            else {}
        )
    started = time.perf_counter()
    command = "python -m autotune.benchmarks.long_job " + " ".join(
        sys.argv[1:] if argv is None else argv
    )

    def write_summary() -> dict[str, Any]:
        summary = summarize(runs, tolerance_for(cfg), args.resume_at)
        summary.update(command=command, wall_s=time.perf_counter() - started)
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
        return summary

    summary = write_summary() if args.merge else {}
    if args.merge:
        runs_path.write_text(json.dumps(runs))
    for phase in phases:
        if phase == "saved":
            runs.pop("resumed", None)  # resumed from the checkpoint of the saved run it followed
        runs[phase] = run_phase(args, phase)
        runs_path.write_text(json.dumps(runs))
        summary = write_summary()
    print(markdown(summary))
    return 0 if all("error" not in r for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
