"""A measurement campaign on a lent GPU machine whose calls are limited to minutes each.

A tuning study of the full model outlasts one device call, so the campaign starts studies as
detached processes (their own session: they survive the call that started them while the
machine stays held) and later calls wait for them, measure what needs the machine alone, and
pack the results::

    python -m autotune.benchmarks.campaign prepare --dir C              # datasets, loader bench, GPU tests
    python -m autotune.benchmarks.campaign start full-1gpu --dir C --gpus 0 --cpus 0-15 -- --preset full --trials 12
    python -m autotune.benchmarks.campaign start suite --dir C --module autotune.benchmarks.gpu_suite -- --nproc 2 ...
    python -m autotune.benchmarks.campaign wait --dir C --seconds 500 full-1gpu
    python -m autotune.benchmarks.campaign pack --dir C --out $OUT

``start NAME`` runs ``python -m autotune run --out C/NAME ARGS`` under ``taskset`` (``--cpus``)
with ``CUDA_VISIBLE_DEVICES`` (``--gpus``), logging to ``C/NAME.log``; two studies on two GPUs of
one host can so each have a 16-core half of it, as a 1-GPU machine has.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

TRACE_SUFFIX = ".pt.trace.json.gz"
MAX_FILE = 15 * 2**20


def run_logged(cmd: list[str], log: Path, timeout: float, env: dict | None = None) -> int:
    print(f"$ {' '.join(cmd)}  > {log.name}", flush=True)
    start = time.monotonic()
    with log.open("w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, env=env).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    print(f"  exit {rc} after {time.monotonic() - start:.0f} s", flush=True)
    return rc


def prepare(args: argparse.Namespace) -> int:
    from autotune.config import TrainConfig
    from autotune.data.cache import cached_dataset, spec_for
    from autotune.workloads.gr00t_n16.data import read_spec
    from autotune.workloads.gr00t_n16.presets import get_preset

    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    for preset in args.presets:
        path = cached_dataset(spec_for(read_spec(get_preset(preset)), TrainConfig().data.episodes))
        print(f"dataset {preset}: {path} ({time.monotonic() - t0:.0f} s)", flush=True)
    py = sys.executable
    if args.loader_workers:
        run_logged([py, "-m", "autotune.benchmarks.loader", "--preset", "full", "--workers", *map(str, args.loader_workers),
                    "--batches", "30", "--json", str(d / "loader.json")], d / "loader.log", 300)
    if args.gpu_tests:
        run_logged([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args.gpu_tests], d / "gpu_tests.log", 300)
    return 0


def start(args: argparse.Namespace) -> int:
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if args.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = args.gpus
    if args.module:  # any module, e.g. the GPU suite: its arguments as given
        cmd = [sys.executable, "-m", args.module, *args.run_args]
    else:
        cmd = [sys.executable, "-m", "autotune", "run", "--out", str(d / args.name), *args.run_args]
    if args.cpus:
        cmd = ["taskset", "-c", args.cpus, *cmd]
    log = (d / f"{args.name}.log").open("a")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL)
    (d / f"{args.name}.pid").write_text(str(proc.pid))
    (d / f"{args.name}.cmd").write_text(" ".join(cmd) + "\n")
    print(f"started {args.name} (pid {proc.pid}): {' '.join(cmd)}", flush=True)
    return 0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours is finished too
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log yet)"
    return lines[-1][:220] if lines else "(empty log)"


STILL_RUNNING = 3  # wait's exit status when its work outlived --seconds (a zombie counts as finished)


def wait(args: argparse.Namespace) -> int:
    d = Path(args.dir)
    deadline = time.monotonic() + args.seconds
    last_print = 0.0
    while True:
        running = [n for n in args.names if alive(int((d / f"{n}.pid").read_text()))]
        now = time.monotonic()
        if not running or now >= deadline or now - last_print >= args.every:
            for n in args.names:
                state = "running" if n in running else "done"
                print(f"[{time.strftime('%H:%M:%S')}] {n} {state}: {last_line(d / f'{n}.log')}", flush=True)
            last_print = now
        if not running:
            return 0
        if now >= deadline:
            print(f"still running after {args.seconds:.0f} s: {running}", flush=True)
            return STILL_RUNNING
        time.sleep(5)


def pack(args: argparse.Namespace) -> int:
    """Everything but the traces in one tarball (only the ``--only`` folders where given); traces each
    as a file of their own: those matching a ``--prefer`` pattern first, in its order, then the largest."""
    d, out = Path(args.dir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def wanted(p: Path) -> bool:
        rel = p.relative_to(d)
        return not args.only or len(rel.parts) == 1 or rel.parts[0] in args.only

    def rank(p: Path) -> tuple[int, int]:
        rel = str(p.relative_to(d))
        first = next((i for i, pat in enumerate(args.prefer) if fnmatch.fnmatch(rel, pat)), len(args.prefer))
        return first, -p.stat().st_size

    traces = sorted((p for p in d.rglob(f"*{TRACE_SUFFIX}") if wanted(p)), key=rank)
    with tarfile.open(out / f"{args.name}.tar.gz", "w:gz") as tar:
        for p in sorted(d.rglob("*")):
            if p.is_file() and not p.name.endswith(TRACE_SUFFIX) and wanted(p):
                tar.add(p, arcname=str(p.relative_to(d)))
    sent, manifest = 0, []
    for p in traces:
        size = p.stat().st_size
        if sent < args.traces and size <= MAX_FILE:
            name = str(p.relative_to(d)).replace("/", "__")
            shutil.copyfile(p, out / name)
            sent += 1
            manifest.append({"path": str(p.relative_to(d)), "file": name, "bytes": size})
        else:
            manifest.append({"path": str(p.relative_to(d)), "file": None, "bytes": size})
    (out / f"{args.name}-traces.json").write_text(json.dumps(manifest, indent=1))
    print(f"packed {d} into {out}: {sent} traces sent of {len(traces)}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autotune.benchmarks.campaign")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--dir", required=True)
    p.add_argument("--presets", nargs="*", default=["full"])
    p.add_argument("--loader-workers", nargs="*", type=int, default=[])
    p.add_argument("--gpu-tests", nargs="*", default=[])
    p.set_defaults(func=prepare)
    p = sub.add_parser("start")
    p.add_argument("name")
    p.add_argument("--dir", required=True)
    p.add_argument("--gpus", default=None)
    p.add_argument("--cpus", default=None)
    p.add_argument("--module", default=None, help="run python -m MODULE ARGS instead of a study (autotune run --out DIR/NAME ARGS)")
    p.set_defaults(func=start)
    p = sub.add_parser("wait")
    p.add_argument("names", nargs="+")
    p.add_argument("--dir", required=True)
    p.add_argument("--seconds", type=float, default=500)
    p.add_argument("--every", type=float, default=60)
    p.set_defaults(func=wait)
    p = sub.add_parser("pack")
    p.add_argument("--dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--name", default="campaign")
    p.add_argument("--traces", type=int, default=5)
    p.add_argument("--only", nargs="*", default=[], help="top-level folders to pack (default: all)")
    p.add_argument("--prefer", nargs="*", default=[], help="glob patterns of traces to send first")
    p.set_defaults(func=pack)
    argv = list(sys.argv[1:] if argv is None else argv)
    run_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    args.run_args = run_args
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
