"""``python -m autotune classify PATH [--json] [--hta]``: where each training step's time goes."""

from __future__ import annotations

import argparse
import json

from autotune.argtypes import PATH, number
from autotune.profiling.classify import MAX_THRESHOLD_US, ClassifyOptions, classify
from autotune.profiling.render import render_text
from autotune.profiling.trace import load_traces

_DEFAULTS = ClassifyOptions()
MICROSECONDS = number(0, high=MAX_THRESHOLD_US, unit="microseconds")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "classify",
        help="split each profiled training step into compute, comm, launch, sync, data and other time",
        description="Classify the steps (ProfilerStep#N) of torch.profiler traces. PATH is a "
        "trace (.json or .json.gz) or a folder of per-rank traces of one run.",
    )
    p.add_argument("path", metavar="PATH", type=PATH)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--hta", action="store_true", help="cross-check against HTA (slow import)")
    p.add_argument(
        "--launch-gap-max-us",
        type=MICROSECONDS,
        default=_DEFAULTS.launch_gap_max_us,
        help="longest idle gap counted as launch overhead (default %(default)s)",
    )
    p.add_argument(
        "--cpu-dispatch-us",
        type=MICROSECONDS,
        default=_DEFAULTS.cpu_dispatch_us,
        help="CPU-only traces: dispatch cost per compute operator (default %(default)s)",
    )
    p.set_defaults(func=run_classify)


def run_classify(args: argparse.Namespace) -> int:
    options = ClassifyOptions(
        launch_gap_max_us=args.launch_gap_max_us, cpu_dispatch_us=args.cpu_dispatch_us
    )
    traces = load_traces(args.path)
    result = classify(traces, options)
    hta = None
    if args.hta:
        from autotune.profiling.hta_check import compare_with_hta

        hta = compare_with_hta(traces)
    if args.json:
        out = result.to_dict()
        if hta is not None:
            out["hta"] = hta.to_dict()
        print(json.dumps(out, indent=2))
    else:
        print(render_text(result, hta))
    return 0
