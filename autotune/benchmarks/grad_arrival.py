"""When in the backward each trainable gradient is ready, per compile choice.

A data-parallel step can only overlap its all-reduce with the backward if gradients become ready
while the backward runs: DDP's buckets and ``ddp.graph_overlap``'s both start as their gradients
arrive. ``torch.compile`` of the whole model turns the backward into one autograd node (or a few,
at graph breaks) whose gradients all arrive at its end; compiling block by block keeps a node a
block. This measures it on the workload itself: one post-accumulate-grad hook per trainable
parameter records the time it fires (in a training session of the stock configuration with the
compile choice), as a fraction of the backward's duration (on CUDA the hook
synchronises first, so the time is when the device got there; that slows the backward, which is
why this is a benchmark of order, not of speed)::

    python -m autotune.benchmarks.grad_arrival --preset tiny --compile eager all blocks

``blocks`` compiles every region of the workload, block by block where it is a block stack.
Reported per choice: the fraction of the backward elapsed when the first, the median and the last
gradient arrived, and the bursts (runs of gradients arriving within 50 µs of each other).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from autotune.config import config_from_dict
from autotune.train.session import Session
from autotune.workloads import get_workload

BURST_GAP_S = 50e-6


def measure(
    preset: str,
    choice: str,
    device: str,
    batch_size: int,
    repeats: int,
    workload_name: str = "gr00t_n16",
) -> dict:
    workload = get_workload(workload_name)
    regions = list(workload.regions(workload.build_model(preset, "meta")))
    compile_regions = {"eager": [], "all": ["all"], "blocks": regions}[choice]
    # the stock configuration (bf16 regions, fp32 trainable weights) with the compile choice, as a trial builds it
    session = Session(
        config_from_dict(
            {
                "workload": workload_name,
                "preset": preset,
                "batch_size": batch_size,
                "device": device,
                "data": {"source": "synthetic"},
                "compile": {"regions": compile_regions},
            }
        )
    )
    model, params, dev = session.model, session.params, session.device
    stamps: list[float] = []

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def ready(_: torch.Tensor) -> None:
        sync()
        stamps.append(time.perf_counter())

    for p in params:
        p.register_post_accumulate_grad_hook(ready)
    batch = workload.synthetic_batch(preset, batch_size, dev, torch.Generator().manual_seed(0))
    runs = []
    for i in range(repeats + 1):  # the first compiles (where compiled) and is not counted
        stamps.clear()
        loss = workload.loss(model, batch)
        sync()
        start = time.perf_counter()
        loss.backward()
        sync()
        end = time.perf_counter()
        model.zero_grad(set_to_none=True)
        if i == 0:
            continue
        fractions = sorted((t - start) / (end - start) for t in stamps)
        ordered = sorted(stamps)
        bursts = 1 + sum(
            1 for a, b in zip(ordered, ordered[1:], strict=False) if b - a > BURST_GAP_S
        )
        runs.append(
            {
                "backward_ms": (end - start) * 1e3,
                "first": fractions[0],
                "median": statistics.median(fractions),
                "last": fractions[-1],
                "bursts": bursts,
                "gradients": len(stamps),
            }
        )
    session.close()
    return {
        "choice": choice,
        "preset": preset,
        "device": str(dev),
        "trainable_params": len(params),
        **{
            k: statistics.median(r[k] for r in runs)
            for k in ("backward_ms", "first", "median", "last", "bursts")
        },
        "runs": runs,
    }


def table(rows: list[dict]) -> str:
    out = [
        "| compile | gradients | backward ms (hooks synchronising) | first | median | last | bursts |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['choice']} | {r['runs'][0]['gradients']} | {r['backward_ms']:.1f} | {r['first']:.2f} | "
            f"{r['median']:.2f} | {r['last']:.2f} | {r['bursts']:.0f} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m autotune.benchmarks.grad_arrival", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--compile",
        nargs="+",
        choices=["eager", "all", "blocks"],
        default=["eager", "all", "blocks"],
    )
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    args = ap.parse_args(argv)
    rows = [
        measure(args.preset, c, args.device, args.batch_size, args.repeats) for c in args.compile
    ]
    print(
        f"`python -m autotune.benchmarks.grad_arrival {' '.join(sys.argv[1:] if argv is None else argv)}`\n"
    )
    print(
        f"preset {args.preset}, {args.batch_size} samples, {args.device}, torch {torch.__version__}; "
        "fractions of the backward elapsed when gradients arrived\n"
    )
    print(table(rows))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
