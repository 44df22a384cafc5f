"""Errors of a configuration's values, named by the file the configuration was read from.

Reading a file names it on every error line (:func:`autotune.config.io.load_config`). Other values
are checked only where a session is built for them (a region the workload lacks, fp8 where the
machine has none, a model left with nothing to train), by code that never learns where the
configuration came from. Those checks run inside :func:`checking_values`, which marks their
errors; a command that read its configuration from a file runs inside :func:`naming_file`, which
puts the file first on a marked error's line, as reading it would have::

    with naming_file("best.yaml"):   # autotune: error: best.yaml: compile.regions: 'x' is not ...
        Session(cfg)

An error that is not about the configuration's values (a flag, a checkpoint, the environment)
passes unchanged: it names what it is about itself.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from autotune.errors import AutotuneError, ConfigError

_MARK = "_autotune_config_values"
"""The attribute of a marked error: True, or ``"named"`` once a file is named on its line."""


@contextlib.contextmanager
def checking_values(*kinds: type[AutotuneError]) -> Iterator[None]:
    """Mark the errors raised inside (``ConfigError``, and ``kinds``) as errors of a value of the
    configuration being checked."""
    try:
        yield
    except (ConfigError, *kinds) as exc:
        if not hasattr(exc, _MARK):
            setattr(exc, _MARK, True)
        raise


@contextlib.contextmanager
def naming_file(path: str | os.PathLike | None) -> Iterator[None]:
    """Put ``path`` first on the line of a marked error raised inside (nothing for None: the
    configuration was not read from a file). The error itself is raised on, its message changed:
    its type, its traceback and what else it carries stay."""
    try:
        yield
    except AutotuneError as exc:
        if path is not None and getattr(exc, _MARK, None) is True:
            exc.args = (f"{path}: {exc}",)
            setattr(exc, _MARK, "named")
        raise
