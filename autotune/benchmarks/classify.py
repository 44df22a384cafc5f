"""Time and peak memory of our trace parse + classify against HTA's ``TraceAnalysis`` load.

Commands (CPU machine). A real trace: a file (``.json`` or ``.json.gz``) or a folder holding one
rank's trace, e.g. what ``python -m autotune profile --out DIR`` wrote; a synthetic one is
written first when ``--synthetic-mb`` is given and TRACE does not exist::

    python -m autotune.benchmarks.classify runs/full_stock_profile --repeats 3 --hta-repeats 3 --json bench.json
    python -m autotune.benchmarks.classify /tmp/synthetic_gpu.json.gz --synthetic-mb 120

The report gives the file's size on disk and its JSON size (the same for ``.json``; for
``.json.gz`` the uncompressed size), and both tools' median time and peak RSS.

Each measurement runs in a fresh interpreter (``--child``), so that peak RSS
(``ru_maxrss`` of the process and of its children: HTA parses in a worker process) belongs to
one tool alone; imports are not timed, and the RSS after imports is reported as ``base_mb``.
Repeats take the median time and the largest peak.

The synthetic trace has the structure ``torch.profiler`` writes for an eager GPU training step:
``ProfilerStep#N`` annotations, nested CPU operators on a main and an autograd thread, a
``cudaLaunchKernel`` per kernel with ``correlation`` ids and ``ac2g`` flows, kernels with
Kineto's arguments on a compute and an NCCL stream, a data-loader span, an H2D copy, an
optimizer of multi-tensor kernels, and a ``cudaGraphLaunch`` replaying a block of kernels.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from autotune.argtypes import POSITIVE, number

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)"
NORM = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)"
ATTN = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)"
FOREACH = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, bool*, float*>"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
LAYER_OPS = (
    ("aten::layer_norm", NORM),
    ("aten::linear", GEMM),
    ("aten::scaled_dot_product_attention", ATTN),
    ("aten::linear", GEMM),
    ("aten::add", ELEMENTWISE),
    ("aten::linear", GEMM),
    ("aten::gelu", ELEMENTWISE),
)


class _Writer:
    """Streams Kineto-shaped events to a gzipped file, one event per line."""

    def __init__(self, fh, rng: random.Random) -> None:
        self.fh, self.rng, self.corr, self.ext, self.bytes = fh, rng, 0, 0, 0
        self.pid, self.main, self.bwd = 3001, 3001, 3050

    def emit(self, ev: dict) -> None:
        line = json.dumps(ev) + ",\n"
        self.bytes += len(line)
        self.fh.write(line)

    def x(self, cat, name, ts, dur, tid, args=None, pid=None) -> None:
        ev = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": self.pid if pid is None else pid,
            "tid": tid,
            "ts": round(ts, 3),
            "dur": round(dur, 3),
        }
        if args is not None:
            ev["args"] = args
        self.emit(ev)

    def op(self, name, ts, dur, tid) -> None:
        self.ext += 1
        self.x(
            "cpu_op",
            name,
            ts,
            dur,
            tid,
            {
                "External id": self.ext,
                "Sequence number": self.ext // 3,
                "Fwd thread id": 0,
                "Record function id": 0,
                "Ev Idx": self.ext,
            },
        )

    def kernel(self, name, ts, dur, corr, stream) -> None:
        grid = [self.rng.choice((132, 264, 1024)), 1, 1]
        self.x(
            "kernel",
            name,
            ts,
            dur,
            stream,
            {
                "queued": 0,
                "device": 0,
                "context": 1,
                "stream": stream,
                "correlation": corr,
                "registers per thread": 128,
                "shared memory": 49152,
                "blocks per SM": 1.0,
                "warps per SM": 8.0,
                "grid": grid,
                "block": [256, 1, 1],
                "est. achieved occupancy %": 12,
            },
            pid=0,
        )

    def launch(self, api, ts, tid) -> int:
        self.corr += 1
        self.x("cuda_runtime", api, ts, 4.0, tid, {"cbid": 211, "correlation": self.corr})
        return self.corr

    def flow(self, corr, host_ts, dev_ts, tid, stream) -> None:
        self.emit(
            {
                "ph": "s",
                "id": corr,
                "pid": self.pid,
                "tid": tid,
                "ts": round(host_ts, 3),
                "cat": "ac2g",
                "name": "ac2g",
            }
        )
        self.emit(
            {
                "ph": "f",
                "id": corr,
                "pid": 0,
                "tid": stream,
                "ts": round(dev_ts, 3),
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )

    def op_with_kernel(self, op, kernel, t, dev, tid) -> tuple[float, float]:
        """An operator that launches one kernel; returns the host and device clocks after it."""
        self.op(op, t, 12.0, tid)
        corr = self.launch("cudaLaunchKernel", t + 5, tid)
        start = max(dev, t + 12)
        dur = self.rng.uniform(2, 60) if kernel is not GEMM else self.rng.uniform(20, 200)
        self.kernel(kernel, start, dur, corr, 7)
        self.flow(corr, t + 5, start, tid, 7)
        return t + 14 + self.rng.uniform(0, 6), start + dur


def _step(w: _Writer, n: int, t: float, layers: int) -> float:
    """One training step starting at host time ``t``; returns the next step's start."""
    w.x(
        "user_annotation",
        "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
        t + 2,
        300.0,
        w.main,
    )
    corr = w.launch("cudaMemcpyAsync", t + 305, w.main)
    w.x(
        "gpu_memcpy",
        "Memcpy HtoD (Pinned -> Device)",
        t + 310,
        40.0,
        7,
        {
            "device": 0,
            "context": 1,
            "stream": 7,
            "correlation": corr,
            "bytes": 1 << 22,
            "memory bandwidth (GB/s)": 100.0,
        },
        pid=0,
    )
    host, dev = t + 320, t + 350
    for _ in range(layers):
        for op, kernel in LAYER_OPS:
            host, dev = w.op_with_kernel(op, kernel, host, dev, w.main)
    corr = w.launch("cudaGraphLaunch", host, w.main)
    for j in range(64):
        w.kernel(ELEMENTWISE if j % 2 else GEMM, dev + 3 * j, 2.5, corr, 7)
    host, dev = host + 8, dev + 200
    for i in range(layers):  # backward on the autograd thread, NCCL every few layers
        w.op("autograd::engine::evaluate_function: AddmmBackward0", host, 40.0, w.bwd)
        for _ in range(2):
            host, dev = w.op_with_kernel("aten::mm", GEMM, host, dev, w.bwd)
        if i % 8 == 7:
            w.op("record_param_comms", host, 10.0, w.bwd)
            corr = w.launch("cudaLaunchKernelExC", host + 2, w.bwd)
            w.kernel(NCCL, dev, 400.0, corr, 20)
    w.x("user_annotation", "Optimizer.step#AdamW.step", host, 200.0, w.main)
    for _ in range(8):
        host, dev = w.op_with_kernel("aten::_fused_adamw_", FOREACH, host, dev, w.main)
    w.x(
        "cuda_runtime",
        "cudaStreamSynchronize",
        host,
        max(dev - host, 1.0),
        w.main,
        {"cbid": 131, "correlation": 0},
    )
    end = max(host, dev) + 5
    w.x("user_annotation", f"ProfilerStep#{n}", t, end - t, w.main)
    return end + 20


def write_synthetic_trace(path: Path, size_mb: float, seed: int = 0, layers: int = 192) -> int:
    """Write steps until the uncompressed JSON reaches ``size_mb``; returns the number of steps."""
    meta = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "displayTimeUnit": "ms",
    }
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=3) as fh:
        head = json.dumps(meta)[:-1] + ', "traceEvents": [\n'
        fh.write(head)
        w = _Writer(fh, random.Random(seed))
        t, n = 5_000_000_000.0, 0
        while w.bytes < size_mb * 1e6:
            t = _step(w, n, t, layers)
            n += 1
        fh.write(
            json.dumps({"ph": "i", "name": "end", "pid": w.pid, "tid": w.main, "ts": t, "s": "g"})
            + "\n]}\n"
        )
    return n


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _child(tool: str, trace: str) -> None:
    """Measure one tool once in this fresh process; print a JSON line."""
    if tool == "ours":
        from autotune.profiling import classify, load_traces

        def work():
            return classify(load_traces(trace)).dominant
    else:
        os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
        import logging

        logging.disable(logging.WARNING)
        from hta.trace_analysis import TraceAnalysis

        def work():
            return len(
                TraceAnalysis(
                    trace_files={0: str(Path(trace).resolve())}, trace_dir=str(Path(trace).parent)
                ).t.traces[0]
            )

    base = _rss_mb()
    t0 = time.perf_counter()
    out = work()
    seconds = time.perf_counter() - t0
    peak_kb = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    )
    print(
        json.dumps(
            {
                "tool": tool,
                "seconds": seconds,
                "peak_mb": peak_kb / 1e3,
                "base_mb": base,
                "out": str(out),
            }
        )
    )


def measure(trace: Path, tool: str, repeats: int) -> dict:
    runs = []
    for _ in range(repeats):
        proc = subprocess.run(
            [sys.executable, "-m", "autotune.benchmarks.classify", "--child", tool, str(trace)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            # A tool that cannot read the trace is a result too (HTA on some CPU-only traces).
            lines = proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"]
            return {"tool": tool, "error": lines[-1]}
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {
        "tool": tool,
        "seconds": statistics.median(r["seconds"] for r in runs),
        "all_seconds": [round(r["seconds"], 2) for r in runs],
        "peak_mb": max(r["peak_mb"] for r in runs),
        "base_mb": statistics.median(r["base_mb"] for r in runs),
        "out": runs[0]["out"],
    }


def one_trace(path: Path) -> Path:
    """The trace file to measure: ``path`` itself, or the one trace inside the folder ``path``."""
    from autotune.errors import TraceFormatError
    from autotune.profiling.trace import trace_files

    files = trace_files(path)
    if len(files) > 1:
        raise TraceFormatError(
            f"{path}: {len(files)} traces ({', '.join(f.name for f in files)}); the benchmark "
            "compares one rank's trace: give one of the files"
        )
    return files[0]


def sizes(trace: Path) -> dict:
    """Size on disk and size of the JSON text, in MB (10^6 bytes)."""
    return {
        "file_mb": trace.stat().st_size / 1e6,
        "json_mb": sum(len(chunk) for chunk in _chunks(trace)) / 1e6,
        "gzipped": trace.name.endswith(".gz"),
    }


def report(trace: Path, repeats: int, hta_repeats: int) -> dict:
    ours = measure(trace, "ours", repeats)
    hta = measure(trace, "hta", hta_repeats)
    both = "error" not in ours and "error" not in hta
    return {
        "trace": str(trace),
        **sizes(trace),
        "ours": ours,
        "hta": hta,
        "speedup": hta["seconds"] / ours["seconds"] if both else None,
        "peak_ratio": hta["peak_mb"] / ours["peak_mb"] if both else None,
    }


def main(argv: list[str] | None = None) -> int:
    from autotune.errors import AutotuneError

    p = argparse.ArgumentParser(
        prog="python -m autotune.benchmarks.classify", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "trace", type=Path, help="a trace file (.json, .json.gz) or a folder of one rank's trace"
    )
    p.add_argument(
        "--synthetic-mb",
        type=number(0, above=True, high=100_000, unit="MB"),
        help="write a synthetic GPU trace of this size first",
    )
    p.add_argument("--repeats", type=POSITIVE, default=3)
    p.add_argument("--hta-repeats", type=POSITIVE, default=1)
    p.add_argument("--json", type=Path, help="also write the report to this file")
    p.add_argument("--child", choices=["ours", "hta"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        _child(args.child, str(args.trace))
        return 0
    if args.synthetic_mb and not args.trace.exists():
        steps = write_synthetic_trace(args.trace, args.synthetic_mb)
        print(
            f"wrote {args.trace}: {steps} steps, {args.trace.stat().st_size / 1e6:.1f} MB gzipped"
        )
    try:
        trace = one_trace(args.trace)
    except AutotuneError as exc:
        print(f"classify benchmark: error: {exc}", file=sys.stderr)
        return exc.exit_code
    out = report(trace, args.repeats, args.hta_repeats)
    text = json.dumps(out, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    kind = "gzipped" if out["gzipped"] else "plain"
    print(
        f"{trace.name}: {out['file_mb']:.1f} MB on disk ({kind}), {out['json_mb']:.1f} MB of JSON"
    )
    return 0 if "error" not in out["ours"] else 1


def _chunks(path: Path):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            yield chunk


if __name__ == "__main__":
    sys.exit(main())
