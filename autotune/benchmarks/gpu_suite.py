"""Measure configurations in one run, each in fresh processes, and compare them with stock.

The headline comparison after a tuning study (stock, what a user would try instead, the tuner's
winner), on one or two GPUs::

    python -m autotune.benchmarks.gpu_suite --preset full --nproc 1 --steps 20 --warmup 5 \
        --configs stock compile_all runs/x/best.yaml --json headline.json

Every row trains ``--workload`` (default gr00t_n16; a file of another workload is refused), e.g.
GR00T N1.7 at upstream's 64 samples a step on one GPU, with the frozen-prefix knobs on top of a
study's best::

    python -m autotune.benchmarks.gpu_suite --workload gr00t_n17 --preset full --batch-size 64 \
        --configs stock compile_all runs/x/best.yaml runs/x/best.yaml+model.frozen_prefix_no_grad=true \
        runs/x/best.yaml+precision.regions.vision=fp8 --out out

The same on the CPU, in a minute (the tiny preset, synthetic batches, gloo for ``--nproc 2``)::

    python -m autotune.benchmarks.gpu_suite --preset tiny --batch-size 2 --source synthetic \
        --steps 3 --warmup 1 --configs stock data_prefetch --json /tmp/suite.json

``--configs`` takes names of :data:`CONFIGS` and configuration files (rows of files are named
after their folder and stem: ``x/best``), each optionally with knobs set on top of it as
``+KEY=VALUE`` (:mod:`autotune.benchmarks.suite_configs`). A run's ``best.yaml`` against stock,
and the same with one knob more, on one GPU::

    python -m autotune.benchmarks.gpu_suite --preset full --steps 15 --warmup 5 --timeout 280 --out out \
        --configs stock runs/x/best.yaml runs/x/best.yaml+optimizer.streams=2

and the same rows checked on a CPU first: ``--fit-machine`` resets to stock the knobs the machine
refuses (CUDA graphs, the device prefetcher) and skips the rows it cannot run at all (fp8), ``--reset``
sets named knobs to stock (a whole-model compile takes minutes on a CPU); every change is recorded
per row::

    python -m autotune.benchmarks.gpu_suite --preset tiny --batch-size 2 --source synthetic --steps 2 \
        --warmup 1 --profile-steps 1 --timeout 900 --fit-machine --reset compile.regions --json /tmp/suite.json \
        --configs stock runs/x/best.yaml runs/x/best.yaml+optimizer.streams=2 \
        runs/x/best.yaml+precision.regions.dit=fp8

Every row is trained from the same seed on the same
data by :func:`autotune.train.trial.launch.launch` (warm-up, then measured steps with the device
synchronised); its loss parity against ``stock`` is computed from the same runs
(:func:`autotune.train.window.verify.compare`). Each row's MFU is its record's
(:func:`autotune.train.trial.record.model_flops_utilization`: against the matmul rate measured in
that row's run, as a study's trials); the bf16 matmul rate of a fresh process, measured once before
the rows, is shown beside the table for reference. Then the fastest row (``--profile`` names others) is profiled
with ``autotune profile`` (:mod:`autotune.train.window.profile`): its profiling overhead (profiled
vs unprofiled steps of that run) and time buckets. ``--model-bench`` adds the stock model
on one batch already on the GPU, eager steps (no data path).

The JSON (``--json``, or ``OUT/suite-<nproc>.json`` with ``--out``) and a markdown twin
(``.md``) are rewritten after every row, so a run cut short keeps what it measured; the
markdown table is printed last. Each row of ``runs`` holds the run's record
(``"record"``: :class:`autotune.train.trial.record.TrialRecord`) beside the row's own fields.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autotune.benchmarks._output import json_target
from autotune.benchmarks.suite_configs import (
    CONFIGS,
    Entry,
    SuiteSettings,
    fit_to_machine,
    region_names,
    reset,
    resolve,
)
from autotune.benchmarks.suite_table import markdown, rows
from autotune.config.io import output_folder
from autotune.errors import AutotuneError
from autotune.train.memcap import BUDGET_ENV, GPU_HELP, budget_of
from autotune.train.trial.launch import launch
from autotune.train.trial.record import TrialRecord, model_flops_utilization
from autotune.train.window.verify import compare, tolerance_for

DEFAULT_CONFIGS = ["stock", "step_graph", "region_graph", "precision_fp16_frozen"]

_MATMUL_CHILD = """
import json, torch
from autotune.train.window.measure import matmul_rate
cuda = torch.cuda.is_available()
device = torch.device("cuda" if cuda else "cpu")
name = torch.cuda.get_device_name(device) if cuda else "cpu"
print(json.dumps({"flops": matmul_rate(device), "device": name,
                  "dtype": "bf16" if cuda else "fp32", "n": 8192 if cuda else 1024}))
"""


def measure_matmul(timeout: float) -> dict[str, Any]:
    """The matmul rate MFU is computed against, measured in a fresh process (``measure.matmul_rate``)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _MATMUL_CHILD], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish within {timeout:.0f} s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["tflops"] = out["flops"] / 1e12
    return out


def model_bench(preset: str, batch: int, steps: int, workload: str = "gr00t_n16") -> dict:
    """Stock model, one batch already on the GPU, eager steps after warm-up (no data path)."""
    import torch

    from autotune.config.stock import stock_config
    from autotune.train.session import Session
    from autotune.train.window.measure import (
        Stats,
        StepTimer,
        matmul_rate,
        peak_memory,
        reset_peak_memory,
    )

    s = Session(stock_config(workload, preset))
    b = s.workload.synthetic_batch(preset, batch, s.device, torch.Generator().manual_seed(0))
    for _ in range(5):
        s.step(b)
    reset_peak_memory(s.device)
    timer = StepTimer(s.device)
    timer.start()
    for _ in range(steps):
        s.step(b)
        timer.lap()
    times, wall = timer.finish()
    stats = Stats.of(times)
    med = stats.median
    rate = matmul_rate(s.device)
    flops = s.workload.flops_per_sample(preset)
    return {
        "name": "model_bench_eager_on_device",
        "step_time_ms": med * 1e3,
        "step_time_spread_ms": {
            "min": stats.minimum * 1e3,
            "max": stats.maximum * 1e3,
            "p10": stats.p10 * 1e3,
            "p90": stats.p90 * 1e3,
        },
        "samples_per_s": batch / med,
        "mfu": model_flops_utilization(flops, batch / med, 1, rate / 1e12),
        "matmul_tflops": rate / 1e12,
        "peak_memory_bytes": peak_memory(s.device)["allocated"],
        "steps": steps,
        "wall_s": wall,
    }


def _log_tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else ""


def budget_env(args: argparse.Namespace) -> dict[str, str] | None:
    """The environment that caps every row's processes at ``--memory-budget`` (None: no cap)."""
    return None if args.budget is None else {BUDGET_ENV: str(args.budget)}


def measure_row(
    entry: Entry, args: argparse.Namespace, stock: TrialRecord | None
) -> tuple[TrialRecord, dict[str, Any]]:
    """Train one row in fresh processes: its record, and the row (with its parity against
    ``stock`` when both runs were measured)."""
    t0 = time.time()
    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="autotune-suite-") as tmp:
        log = Path(tmp) / "run.log"
        record = launch(
            entry.config,
            steps=args.steps,
            warmup=args.warmup,
            nproc=args.nproc,
            timeout=args.timeout,
            log_path=log,
            extra_env=budget_env(args),
        )
        if record.failure is not None:
            res["log_tail"] = _log_tail(log)
    res["elapsed_s"] = time.time() - t0
    res.update(entry.describe())
    res["record"] = record.to_dict()
    if (
        entry.name != "stock"
        and record.measurement is not None
        and stock is not None
        and stock.measurement is not None
    ):
        parity = compare(
            stock.measurement, record.measurement, tolerance_for(entry.config)
        ).to_dict()
        for k in ("stock_losses", "losses", "stock_grad_norms", "grad_norms"):
            parity.pop(k)
        res["parity"] = parity
    return record, res


def profile_row(entry: Entry, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """``autotune profile`` of one row: profiling overhead and time buckets (``classification.summary``)."""
    t0 = time.time()
    folder.mkdir(parents=True, exist_ok=True)
    log = folder.parent / f"{folder.name}.log"
    res = launch(
        entry.config,
        steps=args.profile_steps,
        warmup=args.warmup,
        nproc=args.nproc,
        timeout=args.timeout,
        log_path=log,
        profile_out=folder.resolve(),
        extra_env=budget_env(args),
    )
    summary_path = folder / "classification.summary"
    if res.failure is not None or not summary_path.exists():
        error, reason = (
            (res.failure.error, res.failure.reason)
            if res.failure
            else (f"no {summary_path.name} written", "error")
        )
        out = {"error": error, "reason": reason, "log_tail": _log_tail(log)}
    else:
        summary = json.loads(summary_path.read_text())
        cls = summary.get("classification", {})
        out = {k: summary[k] for k in ("overhead", "profiled_step_ms", "unprofiled_step_ms")}
        out.update(
            {k: cls.get(k) for k in ("buckets", "dominant", "step_time_ms", "launch", "straggler")}
        )
        out["top_kernels"] = (cls.get("top_kernels") or [])[:10]
        out["profiled_steps"] = args.profile_steps
        out["trace_dir"] = str(folder) if args.profile_dir else None
    out["elapsed_s"] = time.time() - t0
    log.unlink(missing_ok=True)
    return out


def _profile_targets(
    wanted: list[str], entries: list[Entry], runs: dict[str, TrialRecord]
) -> list[Entry]:
    speed = {
        name: r.measurement.samples_per_s for name, r in runs.items() if r.measurement is not None
    }
    ok = [e for e in entries if e.name in speed]
    chosen: list[Entry] = []
    for w in wanted:
        if w == "none":
            return []
        if w == "best":
            pick = max(ok, key=lambda e: speed[e.name], default=None)
        else:
            pick = next((e for e in entries if e.name == w), None)
            if pick is None:
                print(
                    f"--profile: no row named {w!r}; rows: {[e.name for e in entries]}", flush=True
                )
        if pick is not None and pick not in chosen:
            chosen.append(pick)
    return chosen


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


class Output:
    """The suite's JSON and its markdown twin, rewritten after every measurement."""

    def __init__(self, json_path: Path | None) -> None:
        self.json_path = json_path
        if json_path is not None:
            json_path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, results: dict[str, Any]) -> None:
        if self.json_path is None:
            return
        self.json_path.write_text(json.dumps({**results, "table": rows(results)}, indent=1))
        self.json_path.with_suffix(".md").write_text(markdown(results) + "\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m autotune.benchmarks.gpu_suite", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "--configs",
        nargs="+",
        default=DEFAULT_CONFIGS,
        help=f"names {sorted(CONFIGS)} or configuration YAML files (e.g. runs/x/best.yaml), each "
        "optionally with knobs on top: ENTRY+KEY=VALUE (e.g. runs/x/best.yaml+optimizer.streams=2)",
    )
    ap.add_argument(
        "--json", type=Path, help="write the results here (and the markdown table beside it, .md)"
    )
    ap.add_argument(
        "--out", type=Path, help="folder for suite-<nproc>.json when --json is not given"
    )
    ap.add_argument(
        "--workload",
        default="gr00t_n16",
        help="the workload every row trains (gr00t_n16, gr00t_n17); files must be of it",
    )
    ap.add_argument("--preset", default="full")
    ap.add_argument("--batch-size", type=int, default=16, help="samples per process per step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--nproc",
        type=int,
        default=1,
        help="processes (GPUs) per row; several run through torchrun",
    )
    ap.add_argument("--steps", type=int, default=20, help="measured steps per row")
    ap.add_argument(
        "--warmup", type=int, default=5, help="warm-up steps per row (graph capture, compilation)"
    )
    ap.add_argument("--timeout", type=float, default=300, help="seconds per row")
    ap.add_argument(
        "--memory-budget",
        default=None,
        help="device memory each row's processes may use, e.g. 40GiB (as `autotune run "
        "--memory-budget`): a row over it fails as out of memory with its peak",
    )
    ap.add_argument("--gpu", default=None, metavar="NAME", help=GPU_HELP)
    ap.add_argument("--source", default="lerobot", choices=["lerobot", "synthetic"])
    ap.add_argument("--video-backend", default="pyav")
    ap.add_argument(
        "--profile",
        nargs="+",
        default=["best"],
        help="rows to profile for overhead and time buckets: row names, 'best' (the fastest) or 'none'",
    )
    ap.add_argument(
        "--profile-steps", type=int, default=5, help="profiled (and as many unprofiled) steps"
    )
    ap.add_argument(
        "--profile-dir",
        type=Path,
        help="keep the profiles' traces here (default: a temporary folder)",
    )
    ap.add_argument(
        "--model-bench",
        action="store_true",
        help="add the eager stock model on one device-resident batch",
    )
    ap.add_argument(
        "--fit-machine",
        action="store_true",
        help="reset to stock every knob this machine refuses (CUDA graphs on a CPU, ...); rows that "
        "still cannot run (fp8) are skipped, not failed; every change is recorded per row",
    )
    ap.add_argument(
        "--reset",
        nargs="+",
        default=[],
        metavar="KEY",
        help="dotted knobs set to their stock value in every row (e.g. compile.regions on a CPU)",
    )
    args = ap.parse_args(argv)
    args.budget = budget_of(args.memory_budget, args.gpu)
    if args.json is None and args.out is not None:
        output_folder(
            args.out, "--out"
        )  # before any row: a file there is one line, not a traceback
        args.json = args.out / f"suite-{args.nproc}.json"
    elif args.json is not None:
        json_target(str(args.json))
    return args


def _prepare_dataset(args: argparse.Namespace) -> None:
    # Made here, once, so that no training process encodes video (and then forks loader
    # workers while the encoder's threads exist) and the dataset is outside every timing.
    from autotune.config import DataConfig
    from autotune.workloads import get_workload

    t0 = time.time()
    # the cached dataset stock reads, made to the workload's preset where it is not there yet
    path = get_workload(args.workload).data_folder(args.preset, DataConfig())
    print(f"dataset: {path} ({time.time() - t0:.1f} s)", flush=True)


def _report(name: str, record: TrialRecord) -> None:
    m, failure = record.measurement, record.failure
    what = (
        f"ERROR {failure.reason}: {failure.error}"
        if failure is not None or m is None
        else f"{m.samples_per_s:.2f} samples/s, {m.step_time.median_ms:.1f} ms"
    )
    print(f"[{time.strftime('%X')}] {name}: {what}", flush=True)


def _fit(entries: list[Entry], args: argparse.Namespace) -> None:
    """``--reset`` and ``--fit-machine`` on every row (rows that cannot run here get ``skipped``)."""
    if not (args.reset or args.fit_machine):
        return
    from autotune.config.compat import Machine

    machine = Machine.current(args.nproc)
    for entry in entries:
        reset(entry, args.reset)
        if args.fit_machine:
            regions = region_names(entry.config.workload, entry.config.preset)
            entry.skipped = fit_to_machine(entry, machine, regions)


def run_suite(args: argparse.Namespace) -> dict[str, Any]:
    settings = SuiteSettings(
        args.preset, args.batch_size, args.source, args.video_backend, args.seed, args.workload
    )
    # Stock first: the parity and the speed-up of every other row are against its run.
    entries = sorted(resolve(args.configs, settings), key=lambda e: e.name != "stock")
    _fit(entries, args)
    for e in entries:
        for key, (was, now) in e.adjusted.items():
            print(f"{e.name}: {key} {was!r} -> {now!r} (set by the suite)", flush=True)
    out = Output(args.json)
    results: dict[str, Any] = {
        "command": "python -m autotune.benchmarks.gpu_suite " + " ".join(args.argv),
        "args": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "argv"
        },
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "runs": {},
        "profiles": {},
    }
    if args.source == "lerobot":
        _prepare_dataset(args)
    results["matmul"] = measure_matmul(args.timeout)
    print(f"matmul: {results['matmul']}", flush=True)
    out.write(results)
    if args.model_bench:
        t0 = time.time()
        try:
            results["model_bench"] = model_bench(
                args.preset, args.batch_size, args.steps, args.workload
            )
        except Exception as exc:  # noqa: BLE001  keep going: the other measurements still count
            results["model_bench"] = {"error": f"{type(exc).__name__}: {exc}"}
        results["model_bench"]["elapsed_s"] = time.time() - t0
        out.write(results)
    records: dict[str, TrialRecord] = {}
    for entry in entries:
        if entry.skipped is not None:
            results["runs"][entry.name] = {"skipped": entry.skipped, **entry.describe()}
            out.write(results)
            print(f"[{time.strftime('%X')}] {entry.name}: skipped: {entry.skipped}", flush=True)
            continue
        records[entry.name], results["runs"][entry.name] = measure_row(
            entry, args, records.get("stock")
        )
        m = records[entry.name].measurement
        results["environment"] = results.get("environment") or (m.environment if m else None)
        out.write(results)
        _report(entry.name, records[entry.name])
    with tempfile.TemporaryDirectory(prefix="autotune-suite-profile-") as tmp:
        root = args.profile_dir or Path(tmp)
        for entry in _profile_targets(args.profile, entries, records):
            results["profiles"][entry.name] = profile_row(entry, args, root / _safe(entry.name))
            out.write(results)
            print(f"[{time.strftime('%X')}] profiled {entry.name}", flush=True)
    results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    out.write(results)
    return results


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
        args.argv = argv
        results = run_suite(args)
    except AutotuneError as exc:
        print(f"gpu_suite: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print()
    print(markdown(results), flush=True)
    return 0 if all("error" not in r for r in rows(results)) else 1


if __name__ == "__main__":
    sys.exit(main())
