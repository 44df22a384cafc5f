"""The optimizer's pass over a preset's trainable tensors: torch's fused AdamW against ``master``.

On one GPU (~30 s for ``full`` on an H200)::

    python -m autotune.benchmarks.optimizer_pass --preset full --json optimizer_pass.json

and the same on a CPU in seconds (the torch path of ``master``; the times mean nothing there)::

    python -m autotune.benchmarks.optimizer_pass --preset tiny --reps 3

The tensors have the shapes, dtypes and parameter groups a training session gives the workload's
trainable parameters (``master``: the weights that bf16 autocast only casts in bf16, with fp32
masters), random values and gradients. Each row is a whole clipped step (gradient norm, clip, update)
captured in a CUDA graph after three eager steps and replayed ``--reps`` times, each replay timed
with CUDA events (median, min, max); ``master`` is also timed as its norm (with the clip coefficient:
over its tables, and on CUDA by torch's multi-tensor kernels too) and its update alone. Beside
them, ``casts``: what the forward and backward of a model with fp32 weights spend casting the weights
that ``master`` stores in bf16 (each weight to bf16, each bf16 gradient back to fp32), the work
``master`` removes from the step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from autotune.config import OptimizerConfig, PrecisionConfig
from autotune.train import precision
from autotune.train.optim import adamw as optim
from autotune.train.optim.master import bf16_with_masters
from autotune.workloads import get_workload

Layout = list[tuple[list[tuple[tuple[int, ...], bool]], float]]
"""Per parameter group: (each parameter's shape and whether master stores it in bf16, weight decay)."""


def layout(workload: str, preset: str) -> Layout:
    """The trainable parameters' groups of ``preset``, from its model on the meta device."""
    w = get_workload(workload)
    model = w.build_model(preset, "meta")
    bf16 = {id(p) for p in precision.autocast_only_params(w.regions(model), PrecisionConfig())}
    return [
        ([(tuple(p.shape), id(p) in bf16) for p in g["params"]], g["weight_decay"])
        for g in w.param_groups(model, 1e-5)
    ]


def build(shapes: Layout, impl: str, streams: int, device: torch.device):
    """(parameters, optimizer) of ``impl`` over random tensors of ``shapes``, with random gradients."""
    gen = torch.Generator(device=device).manual_seed(0)
    groups, params, masters = [], [], {}
    for items, wd in shapes:
        ps = [
            torch.nn.Parameter(torch.randn(s, device=device, generator=gen) * 0.02)
            for s, _ in items
        ]
        if impl == "master":
            masters.update(bf16_with_masters([p for p, (_, bf16) in zip(ps, items) if bf16]))
        groups.append({"params": ps, "weight_decay": wd})
        params += ps
    for p in params:
        p.grad = (torch.randn(p.shape, device=device, generator=gen) * 1e-3).to(p.dtype)
    cfg = OptimizerConfig(impl=impl, streams=streams)
    return params, optim.build_optimizer(
        groups, cfg, capturable=device.type == "cuda", masters=masters
    )


def timed(fn: Callable[[], object], device: torch.device, reps: int) -> dict[str, float]:
    """``fn`` run ``reps`` times after three warm-up runs: median, min and max milliseconds. On CUDA
    ``fn`` is captured in a graph (after the warm-up, on a side stream) and the replays are timed."""
    if device.type != "cuda":
        for _ in range(3):
            fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return _stats(times)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        fn()
    times = []
    for _ in range(reps + 3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return _stats(times[3:])


def _stats(times: list[float]) -> dict[str, float]:
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times)}


def rows(shapes: Layout, device: torch.device, reps: int) -> dict[str, dict[str, float]]:
    out = {}
    for name, impl, streams in (
        ("fused", "fused", 1),
        ("fused_2_streams", "fused", 2),
        ("master", "master", 1),
    ):
        if streams == 1 or device.type == "cuda":
            out.update(_rows(name, shapes, impl, streams, device, reps))
    out["casts"] = casts(shapes, device, reps)
    return out


def _rows(
    name: str, shapes: Layout, impl: str, streams: int, device: torch.device, reps: int
) -> dict[str, dict]:
    """The clipped step of ``impl``; for ``master`` also its norm (``prepare_update``) and its update alone."""
    params, opt = build(shapes, impl, streams, device)
    out = {name: timed(lambda: optim.clip_and_step(opt, params, 1.0), device, reps)}
    if impl == "master":
        opt.prepare()
        out["master_norm"] = timed(lambda: opt.prepare_update(1.0), device, reps)
        if (
            opt.use_kernels
        ):  # the same norm by torch's multi-tensor kernels (what a capture before the tables runs)
            opt.use_kernels = False
            out["master_norm_torch"] = timed(lambda: opt.prepare_update(1.0), device, reps)
            opt.use_kernels = True
        out["master_update"] = timed(opt.apply_update, device, reps)
    return out


def casts(shapes: Layout, device: torch.device, reps: int) -> dict[str, float]:
    """The casts that fp32 weights cost a bf16-autocast step for the weights master stores in bf16."""
    weights = [torch.randn(s, device=device) for items, _ in shapes for s, bf16 in items if bf16]
    grads = [
        torch.randn(s, device=device, dtype=torch.bfloat16)
        for items, _ in shapes
        for s, bf16 in items
        if bf16
    ]

    def run() -> None:
        for w in weights:
            w.to(torch.bfloat16)
        for g in grads:
            g.to(torch.float32)

    return timed(run, device, reps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="gr00t_n16")
    ap.add_argument("--preset", default="full")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shapes = layout(args.workload, args.preset)
    n = sum(torch.Size(s).numel() for items, _ in shapes for s, _ in items)
    n_bf16 = sum(torch.Size(s).numel() for items, _ in shapes for s, bf16 in items if bf16)
    result = {
        "workload": args.workload,
        "preset": args.preset,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "trainable": n,
        "bf16": n_bf16,
        "rows": rows(shapes, device, args.reps),
    }
    print(
        f"{args.preset}: {n / 1e9:.3f} B trainable parameters, {n_bf16 / 1e9:.3f} B of them in bf16 under master"
    )
    for name, r in result["rows"].items():
        print(f"{name:>16}: {r['median_ms']:8.2f} ms  ({r['min_ms']:.2f}-{r['max_ms']:.2f})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
