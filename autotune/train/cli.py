"""``autotune train`` and ``autotune verify``.

python -m autotune train --preset tiny --nproc 2 --steps 4 --json
python -m autotune train --config best.yaml --steps 50
python -m autotune train --config best.yaml --max-steps 2000 --save-steps 500 --output-dir runs/ft
python -m autotune export runs/ft/checkpoint-2000 --out runs/ft/export
python -m autotune verify --config best.yaml --steps 20
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable

from autotune.argtypes import NON_NEGATIVE, POSITIVE, local_path, number
from autotune.config import TrainConfig, load_config
from autotune.config.compat import use_dataset
from autotune.config.io import load_config_as
from autotune.config.named import naming_file
from autotune.errors import ParityError, TrialError
from autotune.train import memcap
from autotune.train.job import cli as job_cli
from autotune.train.trial.record import Measurement, TrialRecord


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a configuration with every knob applied: measure it (--steps) or run "
        "the training job (--max-steps, checkpoints, resume)",
    )
    _common(p)
    p.add_argument(
        "--steps", type=POSITIVE, default=None, help="measured steps (after warm-up; default 20)"
    )
    p.add_argument(
        "--warmup", type=NON_NEGATIVE, default=None, help="warm-up steps, not measured (default 5)"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the run's record (autotune.train.trial.record) as one JSON object on the last line",
    )
    p.add_argument(
        "--memory-budget",
        default=None,
        help="device memory each training process may use, e.g. 24GiB: on CUDA its allocator is "
        "capped there (the CUDA context counted; see autotune/train/memcap.py for what is and is "
        "not emulated), on a CPU its measured peak is checked against it; over it the run fails "
        "as out of memory with its peak",
    )
    p.add_argument("--gpu", default=None, metavar="NAME", help=memcap.GPU_HELP)
    job_cli.add_arguments(p)
    p.set_defaults(func=run_train)

    e = sub.add_parser(
        "export",
        help="write a job's checkpoint as an upstream checkpoint (Hugging Face safetensors)",
    )
    e.add_argument("checkpoint", help="a job's checkpoint folder, D/checkpoint-<step>")
    e.add_argument(
        "--out",
        required=True,
        type=local_path,
        help="new or empty folder for model.safetensors.index.json and its shards",
    )
    e.add_argument(
        "--max-shard-size",
        type=number(0, above=True, unit="GB"),
        default=5.0,
        help="GB per shard (default 5, as save_pretrained)",
    )
    e.add_argument(
        "--workload",
        help="the checkpoint's workload where it is code of yours (path/to/file.py:Class or "
        "package.module:Class): a checkpoint never chooses code to import",
    )
    e.set_defaults(func=run_export)

    pr = sub.add_parser(
        "profile", help="profile a window of a configuration and classify its step time"
    )
    _common(pr)
    pr.add_argument(
        "--out",
        required=True,
        help="folder for the per-rank traces and classification.summary (must be new or empty)",
    )
    pr.add_argument("--steps", type=POSITIVE, default=5, help="profiled (active) steps")
    pr.add_argument(
        "--warmup", type=NON_NEGATIVE, default=5, help="unprofiled warm-up steps before the window"
    )
    pr.add_argument(
        "--json", action="store_true", help="print the summary as one JSON object on the last line"
    )
    pr.set_defaults(func=run_profile)

    v = sub.add_parser(
        "verify", help="loss parity of a configuration against the stock configuration"
    )
    _common(v)
    v.add_argument(
        "--steps",
        type=POSITIVE,
        default=20,
        help="steps each configuration trains after its warm-up; parity compares the steps both "
        "trained from the start, warm-up included",
    )
    v.add_argument(
        "--json", action="store_true", help="print the result as one JSON object on the last line"
    )
    v.set_defaults(func=run_verify)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        help="configuration YAML (e.g. a run's best.yaml); default: the stock configuration",
    )
    p.add_argument(
        "--workload",
        default=None,
        help="workload name, path/to/file.py:Class or package.module:Class "
        "(with no --config: its stock configuration)",
    )
    p.add_argument(
        "--preset",
        default=None,
        help="model preset (default: the workload's, e.g. full on GPU and tiny on "
        "CPU for gr00t_n16)",
    )
    p.add_argument("--batch-size", type=POSITIVE, default=None, help="samples per process per step")
    p.add_argument(
        "--synthetic", action="store_true", help="synthetic batches instead of the dataset (no I/O)"
    )
    p.add_argument(
        "--dataset",
        type=local_path,
        default=None,
        metavar="DIR",
        help="train on this LeRobot dataset folder (sets data.dataset of the configuration)",
    )
    p.add_argument(
        "--nproc", type=POSITIVE, default=1, help="processes (GPUs); several run through torchrun"
    )


def resolve_config(args: argparse.Namespace) -> TrainConfig:
    if args.config:
        cfg = (
            load_config_as(args.config, args.workload)
            if args.workload
            else load_config(args.config)
        )
    else:  # the workload's stock configuration, at its preset for this machine unless one is given
        from autotune.workloads.stock import stock_config  # torch: imported once the input is read

        cfg = stock_config(args.workload or "gr00t_n16", args.preset)
    if args.preset and args.config:
        cfg.preset = args.preset
    if args.batch_size:
        cfg.batch_size = args.batch_size
    use_dataset(cfg, args.dataset, args.synthetic)
    return cfg


def config_source(args: argparse.Namespace) -> str | None:
    """How an error of a value of the command's configuration names it, as reading it would: its
    file (read as ``--workload``'s where that is given); None for a stock configuration."""
    if not args.config:
        return None
    return f"{args.config} (as --workload {args.workload})" if args.workload else args.config


def _naming_config(command: Callable[[argparse.Namespace], int]):
    """``command`` with the errors of its configuration's values (checked where a session is built,
    here or in the processes it starts) naming the file (:mod:`autotune.config.named`)."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        with naming_file(config_source(args)):
            return command(args)

    return run


@_naming_config
def run_train(args: argparse.Namespace) -> int:
    job_cli.check_mode(args)
    cfg = resolve_config(args)  # a wrong file is refused before torch is imported (seconds)
    from autotune.train.batch_fit import check_batch_fits
    from autotune.train.trial.launch import launch
    from autotune.train.window.runner import run_training

    budget = memcap.budget_of(args.memory_budget, args.gpu)
    if budget is not None:  # read by every training process this command starts, this one included
        os.environ[memcap.BUDGET_ENV] = str(budget)
    check_nproc(cfg, args.nproc)
    check_batch_fits(cfg, args.nproc)
    if args.max_steps is not None:
        return job_cli.run(args, cfg, config_source(args))
    args.steps = 20 if args.steps is None else args.steps
    args.warmup = 5 if args.warmup is None else args.warmup
    if args.nproc > 1:
        source = config_source(args)
        record = launch(cfg, steps=args.steps, warmup=args.warmup, nproc=args.nproc, source=source)
        _raise_failure(record, "training")
    else:
        record = run_training(cfg, steps=args.steps, warmup=args.warmup).record()
    assert record.measurement is not None
    if args.json:
        print(record.to_json())
    else:
        _print(record.measurement, cfg)
    return 0


def _raise_failure(record: TrialRecord, what: str) -> None:
    if record.failure is not None:
        raise TrialError(
            f"{what} failed ({record.failure.reason}): {record.failure.error}",
            record.failure.reason,
        )


def _print(m: Measurement, cfg: TrainConfig) -> None:
    s, mem = m.step_time, m.memory
    print(
        f"{cfg.workload}/{cfg.preset} on {m.world_size} x {m.device}, "
        f"{m.batch_size} samples per process, {m.steps} measured steps"
    )
    print(f"  samples/s     {m.samples_per_s:.2f}   tokens/s {m.tokens_per_s:.0f}")
    if m.loader.bound:
        print(
            f"                loader-bound: the window ran at {m.loader.window_samples_per_s:.2f} from the workers' buffer, "
            f"the {cfg.data.num_workers} workers sustain {m.loader.loader_samples_per_s:.2f}"
        )
    print(f"  step time     {s.median_ms:.1f} ms median (p10 {s.p10_ms:.1f}, p90 {s.p90_ms:.1f})")
    print(
        f"  peak memory   {mem.allocated_bytes / 2**30:.2f} GiB allocated, {(mem.reserved_bytes or 0) / 2**30:.2f} GiB reserved"
    )
    print(f"  MFU           {100 * m.mfu:.1f} % of {m.matmul_tflops:.1f} TFLOP/s measured")
    if m.useful_mfu is not None:
        print(
            f"  useful MFU    {100 * m.useful_mfu:.1f} % (the FLOPs that reach the loss or a gradient)"
        )
    print(f"  loss          {m.losses[0]:.4f} -> {m.losses[-1]:.4f}")


def check_nproc(cfg: TrainConfig, nproc: int) -> None:
    """:func:`autotune.config.compat.check_nproc` for ``cfg``'s device."""
    import torch

    from autotune.config.compat import check_nproc as check

    check(nproc, cfg.device != "cpu" and torch.cuda.is_available())


@_naming_config
def run_verify(args: argparse.Namespace) -> int:
    cfg = resolve_config(args)
    check_nproc(cfg, args.nproc)
    from autotune.train.batch_fit import check_batch_fits  # torch: after the file is checked

    check_batch_fits(cfg, args.nproc)  # stock is trained at the same batch
    from autotune.train.window.verify import undecided_text, verify

    res = verify(cfg, steps=args.steps, nproc=args.nproc, source=config_source(args))
    if args.json:
        print(json.dumps(res.to_dict()))
    else:
        verdict = "PASS" if res.passed else "FAIL" if res.decided else "UNDECIDED"
        print(
            f"{verdict}: loss mean differs by {100 * res.loss_rel_diff:.2f} %, gradient norm mean by "
            f"{100 * res.grad_norm_rel_diff:.2f} % (tolerance {100 * res.tolerance:.0f} %) over each run's "
            f"first {res.steps} training steps (warm-up included); "
            f"largest per-step difference: loss {100 * res.max_step_loss_rel_diff:.2f} %, "
            f"gradient norm {100 * res.max_step_grad_norm_rel_diff:.2f} %"
        )
    if not res.decided:
        raise ParityError(
            f"{args.config or 'the configuration'}: loss parity with the stock configuration undecided, "
            f"{undecided_text(res)}"
        )
    if not res.passed:
        raise ParityError(
            f"{args.config or 'the configuration'} does not train the same model as the stock configuration "
            f"(loss {100 * res.loss_rel_diff:.2f} %, gradient norm {100 * res.grad_norm_rel_diff:.2f} %, "
            f"tolerance {100 * res.tolerance:.0f} %)"
        )
    return 0


@_naming_config
def run_profile(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autotune.config.io import output_folder
    from autotune.errors import ConfigError

    cfg = resolve_config(args)
    check_nproc(cfg, args.nproc)
    from autotune.train.batch_fit import check_batch_fits  # torch: after the file is checked

    check_batch_fits(cfg, args.nproc)
    from autotune.train.trial.launch import launch

    out = Path(args.out)
    if out.is_dir() and any(out.iterdir()):
        raise ConfigError(
            f"--out {out}: the profile folder exists and is not empty; give a new folder"
        )
    output_folder(out)
    record = launch(
        cfg,
        steps=args.steps,
        warmup=args.warmup,
        nproc=args.nproc,
        profile_out=out.resolve(),
        source=config_source(args),
    )
    _raise_failure(record, "profiling")
    if args.json:  # the classification in full, as rank 0 wrote it
        print(json.dumps(json.loads((out / "classification.summary").read_text())))
        return 0
    from autotune.profiling import classify
    from autotune.profiling.render import render_text

    profile = record.profile
    assert profile is not None and profile.overhead is not None
    print(render_text(classify(out)))
    print(
        f"profiler overhead: {100 * profile.overhead:.1f} % "
        f"(profiled {profile.profiled_step_ms:.1f} ms vs unprofiled {profile.unprofiled_step_ms:.1f} ms per step)"
    )
    print(f"traces: {out}  (open them in https://ui.perfetto.dev)")
    return 0


def run_export(args: argparse.Namespace) -> int:
    from autotune.train.job.export import export_checkpoint

    exported = export_checkpoint(
        args.checkpoint,
        args.out,
        max_shard_bytes=int(args.max_shard_size * 1e9),
        workload=args.workload,
    )
    if exported.left_out:
        print(f"autotune: note: {exported.left_out}", file=sys.stderr)
    index = exported.index
    shards = len(set(index["weight_map"].values()))
    print(
        f"{args.out}: {len(index['weight_map'])} tensors, {index['metadata']['total_size'] / 2**30:.2f} GiB "
        f"in {shards} shard{'s' if shards > 1 else ''}"
    )
    return 0
