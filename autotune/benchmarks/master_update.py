"""The master AdamW pass over a workload's trainable tensors: its gradient norm and its update.

On one GPU (~1 min for N1.7's ``full``)::

    python -m autotune.benchmarks.master_update --workload gr00t_n17 --preset full --json master.json

and on a CPU in seconds (the torch path; its times mean nothing there)::

    python -m autotune.benchmarks.master_update --workload gr00t_n17 --preset tiny --reps 3

The tensors have the shapes, dtypes and parameter groups a session gives the trainable parameters
(the weights that bf16 autocast only casts, in bf16 with fp32 masters), random values and gradients;
the embodiment slots of the projectors other than the first have no gradient, as when one embodiment
trains (the update's idle blocks). One row per first-moment dtype asked (``--exp-avg``): the norm
(over the tables) and the update, each captured in a CUDA graph after three eager steps and replayed
``--reps`` times, the replays timed by CUDA events between them (median, min, max), and the bytes
the update moves with the rate they give.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import torch

from autotune.benchmarks._output import json_target, write_json
from autotune.config import OptimizerConfig, PrecisionConfig
from autotune.errors import AutotuneError, ConfigError
from autotune.train import precision
from autotune.train.optim import adamw as optim
from autotune.train.optim.master import MasterAdamW, bf16_with_masters
from autotune.train.window.measure import Stats, StepTimer
from autotune.workloads import get_workload

SLOTS_PREFIX = "projectors."
"""Where the embodiment-slot tensors live (their first dimension is the slot)."""


def build(workload: str, preset: str, exp_avg: str, device: torch.device):
    """(parameters, optimizer) over random tensors shaped as the preset's trainable parameters, with
    their gradients: every projector slot but the first without one."""
    w = get_workload(workload)
    model = w.build_model(preset, "meta")
    names = {id(p): n for n, p in model.named_parameters()}
    bf16 = {id(p) for p in precision.autocast_only_params(w.regions(model), PrecisionConfig())}
    gen = torch.Generator(device=device).manual_seed(0)
    groups, params, masters = [], [], {}
    for group in w.param_groups(model, 1e-5):
        made = []
        for p in group["params"]:
            q = torch.nn.Parameter(torch.randn(p.shape, device=device, generator=gen) * 0.02)
            if id(p) in bf16:
                masters.update(bf16_with_masters([q]))
            q.grad = (torch.randn(p.shape, device=device, generator=gen) * 1e-3).to(q.dtype)
            if names[id(p)].startswith(SLOTS_PREFIX) and q.ndim >= 2:
                q.grad[1:] = 0
            made.append(q)
        groups.append({"params": made, "weight_decay": group["weight_decay"]})
        params += made
    cfg = OptimizerConfig(impl="master", exp_avg_dtype=exp_avg)
    return params, optim.build_optimizer(groups, cfg, capturable=True, masters=masters)


def timed(fn: Callable[[], object], device: torch.device, reps: int) -> dict[str, float]:
    """``fn`` ``reps`` times after three warm-up runs, each run's time by :class:`StepTimer`: median,
    min and max milliseconds. On CUDA it is captured in a graph after the warm-up (on a side
    stream), and the graph is replayed three times more before the timed replays."""
    run = fn
    if device.type == "cuda":
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            fn()
        run = graph.replay
    for _ in range(3):
        run()
    timer = StepTimer(device)
    timer.start()
    for _ in range(reps):
        run()
        timer.lap()
    seconds, _ = timer.finish()
    s = Stats.of([t * 1e3 for t in seconds])
    return {"median_ms": s.median, "min_ms": s.minimum, "max_ms": s.maximum}


def update_bytes(opt: MasterAdamW, params: list[torch.nn.Parameter]) -> int:
    """What the update reads and writes: per element with a gradient its gradient, value, both
    moments and bf16 weight; per element of an idle block its value and weight."""
    total = 0
    for p in params:
        master, st = opt.master(p), opt.state[p]
        value = master if master is not None else p
        weight = p.element_size() if master is not None else 0
        full = p.grad.element_size() + 2 * value.element_size() + weight
        full += 2 * (st["exp_avg"].element_size() + st["exp_avg_sq"].element_size())
        busy = _busy_elements(p)
        total += busy * full + (p.numel() - busy) * (2 * value.element_size() + weight)
    return total


def _busy_elements(p: torch.nn.Parameter) -> int:
    """Elements with a gradient (an idle block's moments start and stay zero); the tables' blocks
    round this up by at most a block a slot."""
    return int(p.grad.ne(0).sum())


def rows(workload: str, preset: str, dtypes: list[str], device, reps: int) -> dict[str, dict]:
    out = {}
    for exp_avg in dtypes:
        params, opt = build(workload, preset, exp_avg, device)
        # one eager step: the tables, and moments for the blocks with gradients
        optim.clip_and_step(opt, params, 1.0)
        opt.prepare()
        norm = timed(lambda opt=opt: opt.prepare_update(1.0), device, reps)
        update = timed(opt.apply_update, device, reps)
        moved = update_bytes(opt, params)
        out[exp_avg] = {
            "norm": norm,
            "update": update,
            "update_gb": moved / 1e9,
            "update_tb_per_s": moved / (update["median_ms"] / 1e3) / 1e12,
            "elements": sum(p.numel() for p in params),
        }
        del params, opt
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def render(result: dict) -> str:
    lines = [f"{result['workload']} {result['preset']} on {result['device']}: {result['rows_of']}"]
    lines.append("exp_avg  norm ms  update ms (min-max)   GB moved  TB/s")
    for name, r in result["rows"].items():
        u = r["update"]
        lines.append(
            f"{name:<7}  {r['norm']['median_ms']:7.2f}  {u['median_ms']:8.2f} ({u['min_ms']:.2f}-{u['max_ms']:.2f})"
            f"  {r['update_gb']:8.2f}  {r['update_tb_per_s']:.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(
        prog="python -m autotune.benchmarks.master_update", description=__doc__.split("\n")[0]
    )
    p.add_argument("--workload", default="gr00t_n17", help="workload (default gr00t_n17)")
    p.add_argument("--preset", default="full", help="its preset (default full)")
    p.add_argument("--exp-avg", nargs="+", choices=["fp32", "bf16"], default=["fp32", "bf16"],
                   help="first-moment dtypes to measure, a row each (default both)")  # fmt: skip
    p.add_argument("--reps", type=int, default=20, help="timed replays a row (default 20)")
    p.add_argument("--json", default=None, help="write the result here")
    args = p.parse_args(argv)
    try:
        json_path = json_target(args.json)
        if args.reps < 1:
            raise ConfigError(f"--reps {args.reps}: give 1 or more")
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        result = {
            "workload": args.workload,
            "preset": args.preset,
            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "rows_of": f"median of {args.reps} replays",
            "rows": rows(args.workload, args.preset, args.exp_avg, device, args.reps),
        }
        write_json(json_path, json.dumps(result, indent=2) + "\n")
    except AutotuneError as exc:
        print(f"master_update: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
