"""Command line: ``python -m autotune COMMAND``.

Each command lives in the module that implements it and contributes ``register(subparsers)``,
which adds its parser and sets ``func(args) -> int``. ``main()`` returns the exit code: a known
error (:class:`AutotuneError`) prints one line and exits non-zero; ``--debug`` shows the traceback.

Only the module of the command being run is imported: ``run``, ``train`` and ``inspect`` need
torch (seconds to import, ~290 MB), while ``--help``, ``classify`` and ``report`` must start in a
fraction of a second. The listing of ``--help`` therefore comes from :data:`COMMANDS`, not from
the modules (``tests/test_cli.py`` checks that the two agree).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import signal
import sys

from autotune import sigterm
from autotune.argtypes import OneLineParser
from autotune.childsignals import children_may_end
from autotune.errors import AutotuneError, is_out_of_memory, printable
from autotune.sigterm import Terminated

COMMANDS: dict[str, tuple[str, str]] = {
    # name: (module whose register() adds it, the one line --help lists), in the listing's order
    "run": ("autotune.search.cli", "search the training knobs for the fastest configuration (an Optuna study)"),
    "train": ("autotune.train.cli", "train a configuration with every knob applied: measure it (--steps) or run the "
              "training job (--max-steps, checkpoints, resume)"),
    "export": ("autotune.train.cli", "write a job's checkpoint as an upstream checkpoint (Hugging Face safetensors)"),
    "profile": ("autotune.train.cli", "profile a window of a configuration and classify its step time"),
    "verify": ("autotune.train.cli", "loss parity of a configuration against the stock configuration"),
    "classify": ("autotune.profiling.cli",
                 "split each profiled training step into compute, comm, launch, sync, data and other time"),
    "report": ("autotune.report.cli", "write the HTML report of a run folder (report.html)"),
    "data": ("autotune.data.cli", "check, map (modality.json) or make a LeRobot dataset (v2.0, v2.1, v3.0)"),
    "inspect": ("autotune.workloads.inspect_cmd", "parameter counts and FLOPs per sample of a workload preset"),
    "space": ("autotune.search.cli", "print the search space `run` searches for a workload (as YAML, to edit and pass back "
              "with --space FILE)"),
    "trainer-args": ("autotune.export", "the knobs of a configuration as Hugging Face TrainingArguments, and those that "
                     "do not carry over"),
}  # fmt: skip


def _top_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = OneLineParser(
        prog="autotune",
        description=(
            "Profiling-driven auto-tuner for GR00T N1.6 and N1.7 training (and other PyTorch jobs)."
        ),
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    return parser, parser.add_subparsers(dest="command", metavar="COMMAND")


def _command_in(argv: list[str]) -> str | None:
    """The command named on the line: its first word that is not an option."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``command`` (its module imported), or the listing of every command."""
    parser, sub = _top_parser()
    if command in COMMANDS:
        importlib.import_module(COMMANDS[command][0]).register(sub)
    else:
        for name, (_, line) in COMMANDS.items():
            sub.add_parser(name, help=line, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # first: a stop while the command's modules import is one line too
    previous = sigterm.exit_on_sigterm()
    unraisable = sys.unraisablehook
    sys.unraisablehook = sigterm.stop_again(unraisable)
    try:
        return _command(argv)
    # a scheduler's or a user's kill, or a hang-up (so that finally blocks run): its log says why
    # the command ended
    except Terminated as stop:
        print(stopped_line(stop.code - 128), file=sys.stderr)
        return stop.code
    except BaseException:
        if not sigterm.received():
            raise
        # an error met while the stop waited (autotune.sigterm), from what the signal did to the
        # process group meanwhile (a loader's worker gone): the stop is why the command ended
        print(stopped_line(sigterm.stop_signal()), file=sys.stderr)
        return 128 + sigterm.stop_signal()
    finally:
        sys.unraisablehook = unraisable
        sigterm.restore(previous)


def _command(argv: list[str]) -> int:
    """Parse ``argv`` and run its command; the exit code, a known error printed on one line."""
    try:
        parser = build_parser(_command_in(argv))  # imports the command's modules
    except Exception as exc:
        return _torch_import_failed(exc, "--debug" in argv)
    try:
        args = parser.parse_args(argv)
    except AutotuneError as exc:  # a flag's value out of range, a missing flag: one line
        if "--debug" in argv:
            raise
        _error(one_line(str(exc)))
        return exc.exit_code
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if not argv else 2
    from autotune import quiet

    quiet.install()
    try:
        return int(args.func(args) or 0)
    except AutotuneError as exc:
        if args.debug:
            raise
        _error(one_line(str(exc)))
        return exc.exit_code
    except KeyboardInterrupt:
        children_may_end()
        print("autotune: interrupted", file=sys.stderr)
        return 130
    except (MemoryError, RuntimeError) as exc:
        # torch.OutOfMemoryError (a RuntimeError): the device, or the --memory-budget cap, is full
        if args.debug or not is_out_of_memory(exc):
            raise
        _error(out_of_memory_line(exc) if args.command in TRAINING else _memory_line(exc))
        return 1
    # a file or folder of the command that cannot be used (full disk, no permission)
    except OSError as exc:
        if args.debug:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        _error(f"{where}{exc.strerror or exc} (rerun with --debug for the traceback)")
        return 1
    except Exception as exc:
        return _torch_import_failed(exc, args.debug)


def _torch_import_failed(exc: Exception, debug: bool) -> int:
    """Exit code 2 with :func:`torch_import_line` printed where torch failed to import; anything
    else (or ``--debug``) is raised on."""
    line = None if debug else torch_import_line(exc)
    if line is None:
        raise exc
    _error(line)
    return 2


def _error(line: str) -> None:
    """The one line of a failed command; a password the user typed into a path or URL it names,
    and the environment's secrets, are not repeated. After a stop signal the failure is the stop's
    doing (it came while the stop waited: see :mod:`autotune.sigterm`): the stop is raised."""
    if sigterm.received():
        raise Terminated(128 + sigterm.stop_signal())
    from autotune.redact import hide_secrets

    print(f"autotune: error: {printable(hide_secrets(line))}", file=sys.stderr)


def out_of_memory_line(exc: BaseException) -> str:
    """One line for a run that ran out of memory: where and how much it held (the allocator's words
    up to its advice), and what to do."""
    first = one_line(str(exc)).split(" If reserved")[0].split(" See documentation")[0]
    return (
        f"out of memory: {first or type(exc).__name__}; lower the memory a step needs "
        "(memory.accumulation_steps, checkpointing.regions, a smaller --batch-size) or raise "
        "--memory-budget (rerun with --debug for the traceback)"
    )


def stopped_line(signum: int) -> str:
    """The one line of a command stopped by the signal ``signum`` (SIGTERM, SIGHUP)."""
    return f"autotune: stopped by {signal.Signals(signum).name}"


TRAINING = frozenset({"run", "train", "verify", "profile"})
"""Commands whose memory goes to training steps: the knobs of a step are the advice for them."""


def _memory_line(exc: BaseException) -> str:
    """Out of memory in a command that trains nothing (reading a trace, making a dataset)."""
    first = one_line(str(exc))
    return (
        f"out of memory{f': {first}' if first else ''}; this machine's memory ran out "
        "(rerun with --debug for the traceback)"
    )


def torch_import_line(exc: BaseException) -> str | None:
    """One line for torch failing to import (None where ``exc`` did not come from torch's import):
    torch checks variables of the environment there (``TORCH_LOGS`` names the loggers it knows) and
    raises with pages of text; a command imports torch only when it needs it."""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "<module>" and code.co_filename.endswith(TORCH_INIT):
            first = one_line(str(exc)).split(". ")[0].rstrip(".")
            return (
                f"torch failed to import ({type(exc).__name__}: {first[:200]}): a variable of the "
                "environment torch reads at import (TORCH_LOGS, ...) may be wrong, or the install "
                "broken (rerun with --debug for the traceback)"
            )
        tb = tb.tb_next
    return None


TORCH_INIT = os.path.join("torch", "__init__.py")


def one_line(message: str) -> str:
    """A message on one line: a library's text inside it (pyarrow's, a YAML parser's) may hold
    line breaks, and a user error is one line."""
    flat = re.sub(r"\s*\n\s*", " ", message.strip())
    return re.sub(r" ([)\]}])", r"\1", flat)
