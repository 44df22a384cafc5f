"""``autotune inspect``: parameter counts and FLOPs of a workload preset, built on the meta device.

python -m autotune inspect --workload gr00t_n16 --preset full --json
"""

from __future__ import annotations

import argparse
import json

from autotune.workloads.contract import checked_flops
from autotune.workloads.registry import get_workload, list_workloads


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="parameter counts and FLOPs per sample of a workload preset")
    p.add_argument(
        "--workload",
        default="gr00t_n16",
        help="workload name, path/to/file.py:Class or package.module:Class",
    )
    p.add_argument(
        "--preset", default=None, help="model size preset (default: the workload's default)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--list",
        action="store_true",
        help="list the workloads (built-in, installed, and --workload's) with "
        "their presets and data sources",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.list:
        # a file or module is imported (and so listed); an unknown name is refused, not ignored
        get_workload(args.workload)
        for name in list_workloads():
            w = get_workload(name)
            alias = f" (workload {w.name!r})" if name != w.name else ""
            print(
                f"{name}{alias}: presets {list(w.presets)}, default {w.default_preset}"
                f"{f' ({w.cpu_preset} on CPU)' if w.cpu_preset else ''}; data sources {list(w.data_sources())}"
            )
        return 0
    workload = get_workload(args.workload)
    # an empty --preset (an unset variable) is a name to check, not the default
    preset = workload.default_preset if args.preset is None else args.preset
    workload.check_preset(preset)
    info = (
        workload.describe(preset) if hasattr(workload, "describe") else _generic(workload, preset)
    )
    if args.json:
        print(json.dumps(info))
        return 0
    print(f"{info['workload']} / {info['preset']}")
    print(
        f"  parameters   {info['params_total'] / 1e9:8.3f} B total, {info['params_trainable'] / 1e9:.3f} B trainable"
    )
    print(f"  FLOPs/sample {info['flops_per_sample'] / 1e12:8.3f} TFLOP (forward + backward)")
    useful = info.get("useful_flops_per_sample", info["flops_per_sample"])
    print(
        f"  useful       {useful / 1e12:8.3f} TFLOP (without work whose output never reaches the loss)"
    )
    for name, r in info["regions"].items():
        print(
            f"  region {name:<14} {r['params'] / 1e6:10.2f} M  ({r['trainable'] / 1e6:.2f} M trainable)"
        )
    for name, n in info.get("spec_modules", {}).items():
        print(f"  module {name:<31} {n / 1e6:10.2f} M")
    return 0


def _generic(workload, preset: str) -> dict:
    model = workload.build_model(preset, "meta")
    params = list(model.parameters())
    flops, useful = checked_flops(workload, preset)
    return {
        "workload": workload.name,
        "preset": preset,
        "params_total": sum(p.numel() for p in params),
        "params_trainable": sum(p.numel() for p in params if p.requires_grad),
        "regions": {
            n: {
                "params": sum(p.numel() for m in ms for p in m.parameters()),
                "trainable": sum(p.numel() for m in ms for p in m.parameters() if p.requires_grad),
            }
            for n, ms in workload.regions(model).items()
        },
        "flops_per_sample": flops,
        "useful_flops_per_sample": useful,
    }
