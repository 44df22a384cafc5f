"""Command line: ``python -m autotune COMMAND``.

Each command lives in the module that implements it and contributes ``register(subparsers)``,
which adds its parser and sets ``func(args) -> int``. ``main()`` returns the exit code: a known
error (:class:`AutotuneError`) prints one line and exits non-zero; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import signal
import sys
import threading

from autotune.errors import AutotuneError

# Command modules, in the order ``--help`` lists them.
COMMAND_MODULES = (
    "autotune.search.cli",  # run
    "autotune.train.cli",  # train, verify
    "autotune.profiling.cli",  # profile, classify
    "autotune.report.cli",  # report
    "autotune.data.cli",  # data make, data check
    "autotune.workloads.inspect_cmd",  # inspect
    "autotune.export",  # export
)


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autotune",
        description="Profiling-driven auto-tuner for GR00T N1.6 training (and other PyTorch jobs).",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        if _exists(name):  # a command whose module is not built yet is absent
            importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if not argv else 2
    previous = _exit_on_sigterm()
    try:
        return int(args.func(args) or 0)
    except AutotuneError as exc:
        if args.debug:
            raise
        print(f"autotune: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("autotune: interrupted", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm():
    """Turn SIGTERM into SystemExit, so that ``finally`` blocks run: a killed ``run`` stops its
    trial's process group and removes its temporary folder. Returns the previous handler."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def terminate(signum, frame):
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, terminate)
