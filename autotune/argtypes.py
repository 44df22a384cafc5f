"""Range-checked argparse types: every number on a command line is checked where it is parsed.

A value out of range is refused by argparse before the command does anything (no folder is
created, no model built), on one line naming the flag, the value and what is allowed:
``autotune: error: --steps: 0 is out of range; allowed: an integer >= 1``.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from autotune.errors import ConfigError, short_repr
from autotune.redact import redact

SEED_MAX = 2**32 - 1
"""Seeds are what every consumer accepts: numpy's RandomState (Optuna's samplers) takes
0..2**32-1, and the trainer derives per-rank torch seeds from it that must fit in 64 bits."""


INT64_MAX = 2**63 - 1
"""The largest count a flag takes: what torch, numpy and a configuration file (``_strict``) hold."""


def integer(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in ``[low, high]`` (up to :data:`INT64_MAX` when ``high`` is
    None: ``--max-steps 10**23`` became a job's ``optimizer.total_steps``, which its own checkpoints'
    export refused)."""
    allowed = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not an integer; allowed: {allowed}"
            ) from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is out of range; allowed: {allowed}")
        if value > INT64_MAX:
            raise argparse.ArgumentTypeError(
                f"{value} is out of range; allowed: an integer from {low} to {INT64_MAX}"
            )
        return value

    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse


def number(
    low: float, *, above: bool = False, unit: str = "", high: float = math.inf
) -> Callable[[str], float]:
    """An argparse type: a finite number ``>= low`` (``> low`` with ``above``) and ``<= high``;
    never inf or nan."""
    what = (
        f"a finite number {'>' if above else '>='} {low:g}"
        if high == math.inf
        else f"a number from {low:g}{' (excluded)' if above else ''} to {high:g}"
    ) + (f" ({unit})" if unit else "")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number; allowed: {what}") from None
        if not math.isfinite(value) or not low <= value <= high or (above and value == low):
            raise argparse.ArgumentTypeError(f"{text!r} is out of range; allowed: {what}")
        return value

    parse.__name__ = "number"
    return parse


def duration(text: str) -> float:
    """An argparse type: seconds of ``900``, ``900s``, ``15m`` or ``1.5h``, more than zero."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    value, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
    try:
        seconds = float(value) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration (e.g. 900, 900s, 15m, 1.5h)"
        ) from None
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite time more than zero")
    return seconds


def path(text: str) -> str:
    """An argparse type: a path, which an empty argument is not (``Path("")`` is the current
    folder: ``data make "$UNSET" --force`` would name it)."""
    if not text:
        raise argparse.ArgumentTypeError("'' is not a path; give a file or folder")
    return text


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def not_a_url(text: str) -> str:
    """An argparse type: a value that is not a URL (``https://``, ``s3://``, ``hf://``). Taken as a
    path, one is a folder ``https:`` made in this one, its password in its name and in every line
    that names the folder; the error shows it through :func:`autotune.redact.redact`."""
    if _URL.match(text.strip()):
        raise argparse.ArgumentTypeError(
            f"{short_repr(redact(text), 200)} is a URL; allowed: a local folder (autotune fetches "
            "and uploads nothing)"
        )
    return text


def local_path(text: str) -> str:
    """An argparse type: :func:`path` that is :func:`not_a_url`."""
    return not_a_url(path(text))


PATH = path
POSITIVE = integer(1)
"""Counts that must be at least one: steps, trials, processes, batch sizes, episodes."""
NON_NEGATIVE = integer(0)
"""Counts where zero means none: warm-up steps, profiled steps, confirmation rounds."""
SEED = integer(0, SEED_MAX)
SECONDS = number(0, above=True, unit="seconds")


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are a :class:`ConfigError` (one line, exit code 2, like every
    other user error of the CLI) instead of argparse's usage block and ``SystemExit``."""

    def error(self, message: str):  # type: ignore[override]
        raise ConfigError(message.removeprefix("argument "))
