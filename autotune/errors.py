"""The one exception hierarchy of autotune.

Every user-facing problem raises a subclass of :class:`AutotuneError` with a message that
names the file, key or value at fault and what is allowed. The CLI prints that message on one
line and exits non-zero (a traceback only with ``--debug``).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path


class AutotuneError(Exception):
    """Base of every error autotune raises on purpose."""

    exit_code = 2


class ConfigError(AutotuneError):
    """A configuration file or value is invalid (unknown key, wrong type, out of range)."""


class IncompatibleConfigError(ConfigError):
    """A combination of knobs that cannot work on this machine (e.g. CUDA graphs on CPU)."""


class WorkloadError(AutotuneError):
    """An unknown workload or preset, or a workload that breaks its contract."""


class DataError(AutotuneError):
    """A dataset on disk is missing, incomplete or corrupt."""


class TraceFormatError(AutotuneError):
    """A profiler trace cannot be read or classified."""


class SearchSpaceError(ConfigError):
    """A search-space YAML file is invalid."""


class TrialError(AutotuneError):
    """A training run (a trial) failed; ``reason`` is a short machine-readable tag."""

    def __init__(self, message: str, reason: str = "error") -> None:
        super().__init__(message)
        self.reason = reason


class ParityError(AutotuneError):
    """A configuration does not train the same model as the stock configuration."""

    exit_code = 3


class ReportError(AutotuneError):
    """A run folder cannot be reported on (not a folder, no study in it, an unreadable study)."""


def size_text(n: float) -> str:
    """``n`` bytes as an error line shows them: ``4.7 TiB``, ``21.6 GiB``, ``512 bytes``."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} bytes"


def free_space(folder: Path) -> str:
    """``, N MiB free there`` for an error line of a failed write (a full disk shows in most
    writers' errors only as a short write), or nothing where the disk cannot be asked."""
    try:
        return f", {shutil.disk_usage(folder).free / 2**20:.0f} MiB free there"
    except OSError:
        return ""


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message ("" for none): a library's error (torch's, safetensors')
    quoted in one line of autotune's."""
    text = str(exc)
    return text.splitlines()[0] if text else ""


CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""Control characters but tab, and the bidirectional overrides: what a terminal would act on
(an escape sequence clearing the screen, a carriage return rewriting the line) or show reordered."""


def printable(text: str) -> str:
    """``text`` with :data:`CONTROL` characters written out as escapes (``\\x1b``, ``\\u202e``)."""
    return CONTROL.sub(lambda m: ascii(m.group())[1:-1], text)


def short_repr(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: a value quoted from a file someone handed over."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def listed(what: str, items: Sequence[str | tuple[str, str]], most: int = 3) -> str:
    """``4 missing keys ('a', 'b', 'c' and 1 more)``: names read from a file someone handed over
    (a checkpoint's keys, a folder's files), each through :func:`short_repr`, so that a control
    character in one (``\\r``, an escape sequence rewriting the terminal's line) is shown escaped.
    An item ``(name, detail)`` is shown as the name followed by the detail (``'w' is I32``)."""
    pairs = [(item, "") if isinstance(item, str) else item for item in items]
    shown = ", ".join(
        f"{short_repr(name, NAME_CHARS)}{f' {d}' if d else ''}" for name, d in pairs[:most]
    )
    more = f" and {len(pairs) - most} more" if len(pairs) > most else ""
    return f"{len(pairs)} {what} ({shown}{more})"


NAME_CHARS = 120
"""A name :func:`listed` shows whole: the longest upstream keys are ~90 characters."""


def kind_of(value: object) -> str:
    """What ``value`` is, without any of its content: ``a string of 34 characters``, ``a list of 3
    items``. For a whole file read where a mapping belongs: a wrong file handed over (a credentials
    file, a page of text) is then named by its kind and never echoed into a terminal or a log."""
    if isinstance(value, str):
        return f"a string of {len(value):,} character{'s' if len(value) != 1 else ''}"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value):,} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    return f"a {type(value).__name__}"


def is_out_of_memory(exc: BaseException) -> bool:
    """``exc`` says memory ran out: Python's ``MemoryError``, torch's ``OutOfMemoryError`` (the
    device, or the ``--memory-budget`` cap), a CUDA error naming it, or the ``RuntimeError`` of
    torch's CPU allocator (``DefaultCPUAllocator: can't allocate memory``)."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower()
    return "out of memory" in text or "can't allocate memory" in text
