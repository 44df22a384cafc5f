"""Throughput of the real data path: loader samples/s per worker count, and one sample's cost.

    python -m autotune.benchmarks.loader --preset full --workers 0 1 2 --batches 30 --json loader.json

For each ``--workers`` value a fresh ``build_loader`` (persistent workers, no pinning) yields
``--warmup`` batches, then ``--batches`` timed ones; samples/s is reported over the whole timed
stretch (``overall``) and per window of ``max(1, workers)`` consecutive batches (median and
10th-90th percentiles), since workers hand their batches over in round-robin bursts. The
cost of one sample is timed in this process with one torch thread, as in a worker: decoding its
views (seek + decode forward), augmenting them, and the whole ``dataset[key]``. Without
``--dataset`` the cached dataset of ``build_loader`` is used (made first if needed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from autotune.config import DataConfig
from autotune.data import LeRobotDataset
from autotune.data.augment import augment
from autotune.data.cache import cached_dataset, spec_for
from autotune.data.sampler import ShardedInfiniteSampler, sample_generator
from autotune.workloads.gr00t_n16.data import Gr00tDataset, build_loader, read_spec
from autotune.workloads.gr00t_n16.presets import get_preset


def machine() -> dict:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import av

    return {"cpu": model, "cpus": os.cpu_count(), "cuda": torch.cuda.is_available(), "torch": torch.__version__,
            "av": av.__version__, "python": platform.python_version(),
            "loadavg_at_start": list(os.getloadavg())}  # fmt: skip


def _ms(values: list[float]) -> dict:
    ms = sorted(v * 1e3 for v in values)
    return {
        "median_ms": statistics.median(ms),
        "p10_ms": _pct(ms, 10),
        "p90_ms": _pct(ms, 90),
        "n": len(ms),
    }


def _pct(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, round(q / 100 * (len(sorted_values) - 1)))]


def sample_cost(ds: LeRobotDataset, samples: int, seed: int = 0) -> dict:
    """Median ms of decoding, augmenting and loading one sample, with one torch thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        keys = [k for k, _ in zip(ShardedInfiniteSampler(len(ds), seed=seed), range(samples))]
        for episode in range(len(ds.meta.episodes)):  # open every container first: steady state
            ds.read_frames(episode, 0)
        decode, aug, whole = [], [], []
        for draw, index in keys:
            episode, frame = ds.locate(index)
            t0 = time.perf_counter()
            frames = ds.read_frames(episode, frame)
            t1 = time.perf_counter()
            augment(frames, ds.augment_spec, sample_generator(seed, draw))
            t2 = time.perf_counter()
            ds[(draw, index)]
            t3 = time.perf_counter()
            decode.append(t1 - t0)
            aug.append(t2 - t1)
            whole.append(t3 - t2)
    finally:
        torch.set_num_threads(threads)
    return {"decode": _ms(decode), "augment": _ms(aug), "sample": _ms(whole)}


def loader_rate(
    preset, root: Path, workers: int, batch_size: int, batches: int, warmup: int, backend: str
) -> dict:
    data = DataConfig(
        dataset=str(root), num_workers=workers, pin_memory=False, video_backend=backend
    )
    loader = build_loader(preset, data, batch_size, seed=0)
    it = iter(loader)
    start = time.perf_counter()
    next(it)
    first = time.perf_counter() - start
    for _ in range(warmup):
        next(it)
    stamps = [time.perf_counter()]
    for _ in range(batches):
        next(it)
        stamps.append(time.perf_counter())
    del it, loader  # stops the workers
    # Workers hand batches over in bursts (one each, round-robin): rate per window of `workers` batches.
    w = max(1, workers)
    windows = list(zip(stamps[::w], stamps[w::w]))
    rates = sorted(batch_size * w / (b - a) for a, b in windows)
    return {
        "workers": workers, "batches": batches, "window_batches": w, "first_batch_s": first,
        "samples_per_s": {"median": statistics.median(rates), "p10": _pct(rates, 10), "p90": _pct(rates, 90),
                          "overall": batch_size * batches / (stamps[-1] - stamps[0])},
        "intervals_s": [round(b - a, 4) for a, b in zip(stamps, stamps[1:])],
    }  # fmt: skip


def run(args: argparse.Namespace) -> dict:
    preset = get_preset(args.preset)
    root = Path(args.dataset) if args.dataset else cached_dataset(spec_for(read_spec(preset), args.episodes))
    # The loaders first: decoding in this process starts the decoder's threads, and forking
    # loader workers after that can deadlock them (seen as a hang on the 16- and 32-core GPU
    # machines when the per-sample cost was measured first).
    loader = [
        loader_rate(preset, root, w, args.batch_size, args.batches, args.warmup, args.backend)
        for w in args.workers
    ]
    ds = Gr00tDataset(root, preset, video_backend=args.backend)
    return {
        "command": "python -m autotune.benchmarks.loader " + " ".join(args.argv),
        "machine": machine(), "preset": preset.name, "batch_size": args.batch_size, "dataset": str(root),
        "frames": ds.meta.total_frames, "video": list(ds.meta.video_shapes.values())[0], "backend": args.backend,
        "per_sample": sample_cost(ds, args.samples), "loader": loader,
    }  # fmt: skip


def render(r: dict) -> str:
    m, ps = r["machine"], r["per_sample"]
    lines = [
        f"{m['cpu']} ({m['cpus']} cpus), torch {m['torch']}, PyAV {m['av']}; preset {r['preset']}, "
        f"batch {r['batch_size']}, video {r['video'][1]}x{r['video'][0]} ({r['backend']})",
        f"one sample (1 thread): decode {ps['decode']['median_ms']:.1f} ms, augment {ps['augment']['median_ms']:.1f} ms, "
        f"whole sample {ps['sample']['median_ms']:.1f} ms (medians of {ps['sample']['n']})",
        "workers  samples/s median  p10-p90        overall  first batch",
    ]
    for row in r["loader"]:
        s = row["samples_per_s"]
        lines.append(
            f"{row['workers']:>7}  {s['median']:>16.1f}  {s['p10']:>6.1f}-{s['p90']:<7.1f} {s['overall']:>7.1f}"
            f"  {row['first_batch_s']:.2f} s"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(
        prog="python -m autotune.benchmarks.loader", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "--preset", default="full", help="gr00t_n16 preset whose shapes are produced (default full)"
    )
    p.add_argument(
        "--workers", type=int, nargs="+", default=[0, 1, 2], help="num_workers values to measure"
    )
    p.add_argument("--batches", type=int, default=30, help="timed batches per worker count")
    p.add_argument(
        "--warmup", type=int, default=3, help="batches after the first one before timing"
    )
    p.add_argument(
        "--batch-size", type=int, default=16, help="samples per batch (default 16, the spec's)"
    )
    p.add_argument("--samples", type=int, default=40, help="samples timed for the per-sample cost")
    p.add_argument("--episodes", type=int, default=8, help="episodes of the cached dataset")
    p.add_argument("--dataset", default=None, help="dataset folder (default: the cached one)")
    p.add_argument("--backend", default="pyav", help="video backend (default pyav)")
    p.add_argument("--json", default=None, help="write the result here")
    args = p.parse_args(argv)
    args.argv = argv
    result = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
