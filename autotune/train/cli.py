"""``autotune train`` and ``autotune verify``.

    python -m autotune train --preset tiny --nproc 2 --steps 4 --json
    python -m autotune train --config best.yaml --steps 50
    python -m autotune verify --config best.yaml --steps 20
"""

from __future__ import annotations

import argparse
import json

from autotune.config import TrainConfig, load_config
from autotune.errors import ParityError, TrialError
from autotune.workloads.stock import stock_config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a configuration with every knob applied, and measure it")
    _common(p)
    p.add_argument("--steps", type=int, default=20, help="measured steps (after warm-up)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up steps, not measured")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object on the last line")
    p.set_defaults(func=run_train)

    pr = sub.add_parser("profile", help="profile a window of a configuration and classify its step time")
    _common(pr)
    pr.add_argument("--out", required=True, help="folder for the per-rank traces and classification.summary (must be new or empty)")
    pr.add_argument("--steps", type=int, default=5, help="profiled (active) steps")
    pr.add_argument("--warmup", type=int, default=5, help="unprofiled warm-up steps before the window")
    pr.add_argument("--json", action="store_true", help="print the summary as one JSON object on the last line")
    pr.set_defaults(func=run_profile)

    v = sub.add_parser("verify", help="loss parity of a configuration against the stock configuration")
    _common(v)
    v.add_argument("--steps", type=int, default=20, help="steps trained by each configuration")
    v.add_argument("--json", action="store_true", help="print the result as one JSON object on the last line")
    v.set_defaults(func=run_verify)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="configuration YAML (e.g. a run's best.yaml); default: the stock configuration")
    p.add_argument("--workload", default=None, help="workload name, path/to/file.py:Class or package.module:Class "
                   "(with no --config: its stock configuration)")
    p.add_argument("--preset", default=None, help="model preset (default: the workload's, e.g. full on GPU and tiny on "
                   "CPU for gr00t_n16)")
    p.add_argument("--batch-size", type=int, default=None, help="samples per process per step")
    p.add_argument("--synthetic", action="store_true", help="synthetic batches instead of the dataset (no I/O)")
    p.add_argument("--nproc", type=int, default=1, help="processes (GPUs); several run through torchrun")


def resolve_config(args: argparse.Namespace) -> TrainConfig:
    if args.config:
        cfg = load_config(args.config)
    else:  # the workload's stock configuration, at its preset for this machine unless one is given
        cfg = stock_config(args.workload or "gr00t_n16", args.preset)
    if args.workload and args.config:
        cfg.workload = args.workload
    if args.preset and args.config:
        cfg.preset = args.preset
    if args.batch_size:
        cfg.batch_size = args.batch_size
    if args.synthetic:
        cfg.data.source = "synthetic"
    return cfg


def run_train(args: argparse.Namespace) -> int:
    from autotune.train.launch import launch
    from autotune.train.runner import run_training

    cfg = resolve_config(args)
    if args.nproc > 1:
        result = launch(cfg, steps=args.steps, warmup=args.warmup, nproc=args.nproc)
        if "error" in result:
            raise TrialError(f"training failed ({result['reason']}): {result['error']}", result["reason"])
    else:
        result = run_training(cfg, steps=args.steps, warmup=args.warmup).to_dict()
    if args.json:
        print(json.dumps(result))
    else:
        _print(result)
    return 0


def _print(r: dict) -> None:
    s = r["step_time_spread_ms"]
    print(f"{r['config']['workload']}/{r['config']['preset']} on {r['world_size']} x {r['device']}, "
          f"{r['batch_size']} samples per process, {r['steps']} measured steps")
    print(f"  samples/s     {r['samples_per_s']:.2f}   tokens/s {r['tokens_per_s']:.0f}")
    if r.get("loader_bound"):
        print(f"                loader-bound: the window ran at {r['window_samples_per_s']:.2f} from the workers' buffer, "
              f"the {r['config']['data']['num_workers']} workers sustain {r['loader_samples_per_s']:.2f}")
    print(f"  step time     {r['step_time_ms']:.1f} ms median (p10 {s['p10']:.1f}, p90 {s['p90']:.1f})")
    print(f"  peak memory   {r['peak_memory_bytes'] / 2**30:.2f} GiB allocated, {r['peak_reserved_bytes'] / 2**30:.2f} GiB reserved")
    print(f"  MFU           {100 * r['mfu']:.1f} % of {r['matmul_tflops']:.1f} TFLOP/s measured")
    print(f"  loss          {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}")


def run_verify(args: argparse.Namespace) -> int:
    from autotune.train.verify import verify

    cfg = resolve_config(args)
    res = verify(cfg, steps=args.steps, nproc=args.nproc)
    if args.json:
        print(json.dumps(res.to_dict()))
    else:
        verdict = "PASS" if res.passed else "FAIL"
        print(f"{verdict}: loss mean differs by {100 * res.loss_rel_diff:.2f} %, gradient norm mean by "
              f"{100 * res.grad_norm_rel_diff:.2f} % (tolerance {100 * res.tolerance:.0f} %) over {res.steps} steps; "
              f"largest per-step difference: loss {100 * res.max_step_loss_rel_diff:.2f} %, "
              f"gradient norm {100 * res.max_step_grad_norm_rel_diff:.2f} %")
    if not res.passed:
        raise ParityError(f"{args.config or 'the configuration'} does not train the same model as the stock configuration "
                          f"(loss {100 * res.loss_rel_diff:.2f} %, gradient norm {100 * res.grad_norm_rel_diff:.2f} %, "
                          f"tolerance {100 * res.tolerance:.0f} %)")
    return 0


def run_profile(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autotune.errors import ConfigError
    from autotune.train.launch import launch

    cfg = resolve_config(args)
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out}: the profile folder exists and is not empty; give a new folder")
    out.mkdir(parents=True, exist_ok=True)
    result = launch(cfg, steps=args.steps, warmup=args.warmup, nproc=args.nproc, profile_out=out.resolve())
    if "error" in result:
        raise TrialError(f"profiling failed ({result['reason']}): {result['error']}", result["reason"])
    if args.json:
        print(json.dumps(result))
        return 0
    from autotune.profiling import classify
    from autotune.profiling.render import render_text

    print(render_text(classify(out)))
    print(f"profiler overhead: {100 * result['overhead']:.1f} % "
          f"(profiled {result['profiled_step_ms']:.1f} ms vs unprofiled {result['unprofiled_step_ms']:.1f} ms per step)")
    print(f"traces: {out}  (open them in https://ui.perfetto.dev)")
    return 0
