"""Throughput of the real data path: loader samples/s per dataset format and worker count, and one
sample's cost.

    python -m autotune.benchmarks.loader --preset full --workers 0 1 2 --batches 30 --json loader.json
    python -m autotune.benchmarks.loader --preset full --format v2.1 v3.0 --workers 2 8 14 --json fmt.json
    python -m autotune.benchmarks.loader --preset tiny --format v2.1 v3.0 --workers 0 2 --batches 8  # CPU

Each ``--format`` reads the same episodes (same seed, content and codec) laid out as that
codebase version: v2.1 a parquet file and an mp4 per view for every episode, v3.0 all of them in
one data file and one mp4 per view, each episode a row and timestamp range. The cached datasets
are made first, the formats in parallel. For each format and ``--workers`` value a fresh
``build_loader`` (persistent workers, no pinning) yields
``--warmup`` batches, then ``--batches`` timed ones; samples/s is reported over the whole timed
stretch (``overall``) and per window of ``max(1, workers)`` consecutive batches (median and
10th-90th percentiles), since workers hand their batches over in round-robin bursts. The
cost of one sample is timed in this process with one torch thread, as in a worker: decoding its
views at a random frame of a random episode (open the file on first use, seek to the key frame,
decode forward: random access), augmenting them, and the whole ``dataset[key]``; ``open`` is
the time to open one video file and decode its first frame. ``--dataset`` measures one given
folder instead of the cached ones.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import torch

from autotune.benchmarks._output import json_target, write_json
from autotune.config import DataConfig
from autotune.data import LeRobotDataset
from autotune.data.cache import cached_dataset, spec_for
from autotune.data.make import FORMATS
from autotune.data.sampler import ShardedInfiniteSampler
from autotune.data.video import open_reader
from autotune.errors import AutotuneError, DataError
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
            "av": av.__version__, "python": platform.python_version(), "ffmpeg": ffmpeg_codecs(),
            "loadavg_at_start": list(os.getloadavg())}  # fmt: skip


def ffmpeg_codecs() -> dict[str, list[str]]:
    """The AV1 / H.264 / HEVC decoders and encoders of PyAV's FFmpeg."""
    import av

    def have(names: tuple[str, ...], mode: str) -> list[str]:
        out = []
        for name in names:
            try:
                av.Codec(name, mode)
                out.append(name)
            except Exception:  # not in this build
                pass
        return out

    return {"decoders": have(("libdav1d", "libaom-av1", "av1", "h264", "hevc"), "r"),
            "encoders": have(("libsvtav1", "libaom-av1", "librav1e", "libx264", "libx265"), "w")}  # fmt: skip


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
    """Median ms of decoding, augmenting and loading one random sample, with one torch thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        keys = [k for k, _ in zip(ShardedInfiniteSampler(len(ds), seed=seed), range(samples))]
        files = sorted({span.path for ep in ds.meta.episodes for span in ep.videos.values()})
        opened = []
        for path in files[:samples]:
            t0 = time.perf_counter()
            open_reader(ds.readers.backend, path, ds.meta.fps).frame(0)
            opened.append(time.perf_counter() - t0)
        decode, aug, whole = [], [], []
        for draw, index in keys:
            episode, frame = ds.locate(index)
            t0 = time.perf_counter()
            frames = ds.read_frames(episode, frame)
            t1 = time.perf_counter()
            ds.augmented(frames, draw)
            t2 = time.perf_counter()
            ds[(draw, index)]
            t3 = time.perf_counter()
            decode.append(t1 - t0)
            aug.append(t2 - t1)
            whole.append(t3 - t2)
    finally:
        torch.set_num_threads(threads)
    return {
        "open": _ms(opened),
        "decode": _ms(decode),
        "augment": _ms(aug),
        "sample": _ms(whole),
        "video_files": len(files),
    }


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


def datasets(args: argparse.Namespace, preset) -> dict[str, Path]:
    """Format -> dataset folder: ``--dataset`` as is, else the cached datasets, made in parallel."""
    if args.dataset:
        from autotune.data import load_meta

        return {load_meta(args.dataset).version: Path(args.dataset)}
    base = replace(spec_for(read_spec(preset), args.episodes), codec=args.codec, frames=args.frames)
    with ThreadPoolExecutor(len(args.format)) as pool:  # each make runs in a process of its own
        paths = pool.map(lambda f: cached_dataset(replace(base, format=f)), args.format)
        return dict(zip(args.format, paths, strict=True))


def run(args: argparse.Namespace) -> dict:
    preset = get_preset(args.preset)
    t0 = time.perf_counter()
    roots = datasets(args, preset)
    made_s = time.perf_counter() - t0
    # The loaders first: decoding in this process starts the decoder's threads, and forking
    # loader workers after that can deadlock them (seen as a hang on the 16- and 32-core GPU
    # machines when the per-sample cost was measured first).
    loader = [
        {"format": fmt, **loader_rate(preset, root, w, args.batch_size, args.batches, args.warmup, args.backend)}
        for fmt, root in roots.items() for w in args.workers
    ]  # fmt: skip
    per_format = {}
    for fmt, root in roots.items():
        ds = Gr00tDataset(root, preset, video_backend=args.backend)
        per_format[fmt] = {"dataset": str(root), "frames": ds.meta.total_frames, "episodes": len(ds.meta.episodes),
                           "video": list(ds.meta.video_shapes.values())[0], "codec": ds.meta.codecs()[ds.views[0]],
                           "per_sample": sample_cost(ds, args.samples)}  # fmt: skip
    return {
        "command": "python -m autotune.benchmarks.loader " + " ".join(args.argv),
        "machine": machine(), "preset": preset.name, "batch_size": args.batch_size, "backend": args.backend,
        "datasets_ready_s": made_s, "formats": per_format, "loader": loader,
    }  # fmt: skip


def render(r: dict) -> str:
    m = r["machine"]
    lines = [f"{m['cpu']} ({m['cpus']} cpus), torch {m['torch']}, PyAV {m['av']}; preset {r['preset']}, "
             f"batch {r['batch_size']} ({r['backend']}); datasets ready in {r['datasets_ready_s']:.0f} s"]  # fmt: skip
    for fmt, f in r["formats"].items():
        ps = f["per_sample"]
        lines.append(
            f"{fmt}: {f['episodes']} episodes, {f['frames']} frames, video {f['video'][1]}x{f['video'][0]} {f['codec']} "
            f"in {ps['video_files']} files; one sample (1 thread): open a file {ps['open']['median_ms']:.1f} ms, "
            f"decode {ps['decode']['median_ms']:.1f} ms ({ps['decode']['p10_ms']:.1f}-{ps['decode']['p90_ms']:.1f}), "
            f"augment {ps['augment']['median_ms']:.1f} ms, whole sample {ps['sample']['median_ms']:.1f} ms "
            f"(medians of {ps['sample']['n']})"
        )
    lines.append("format  workers  samples/s median  p10-p90        overall  first batch")
    for row in r["loader"]:
        s = row["samples_per_s"]
        lines.append(
            f"{row['format']:<6}  {row['workers']:>7}  {s['median']:>16.1f}  {s['p10']:>6.1f}-{s['p90']:<7.1f} "
            f"{s['overall']:>7.1f}  {row['first_batch_s']:.2f} s"
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
    p.add_argument(
        "--frames",
        type=int,
        default=None,
        help="frames per episode of the cached dataset (default 60-150)",
    )
    p.add_argument(
        "--dataset", default=None, help="one dataset folder to measure (default: the cached ones)"
    )
    p.add_argument("--format", nargs="+", choices=list(FORMATS), default=["v2.1"],
                   help="layouts of the cached dataset to compare (default v2.1)")  # fmt: skip
    p.add_argument(
        "--codec", default="h264", help="video codec of the cached datasets (default h264)"
    )
    p.add_argument("--backend", default="pyav", help="video backend (default pyav)")
    p.add_argument("--json", default=None, help="write the result here")
    args = p.parse_args(argv)
    args.argv = argv
    try:
        json_path = json_target(args.json)
        if args.dataset and len(args.format) > 1:
            raise DataError(
                "--dataset measures one folder; --format compares the cached datasets: pass one or the other"
            )
        result = run(args)
        write_json(json_path, json.dumps(result, indent=2) + "\n")
    except AutotuneError as exc:
        print(f"loader: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
