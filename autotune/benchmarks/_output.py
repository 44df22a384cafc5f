"""The ``--json`` file a benchmark writes when its measurements end: checked before they start, so
that minutes of measuring are never lost to a path that cannot be written."""

from __future__ import annotations

from pathlib import Path

from autotune.config.io import output_folder, write_output
from autotune.errors import ConfigError


def json_target(text: str | None) -> Path | None:
    """The path of ``--json`` (None when not given), its folder made; a folder at the path, or a
    folder that cannot be written, is a ConfigError naming ``--json``."""
    if text is None:
        return None
    path = Path(text)
    if path.is_dir():
        raise ConfigError(
            f"--json {path}: is a folder; give the file to write (e.g. {path / 'result.json'})"
        )
    output_folder(path.parent, "--json")
    return path


def write_json(path: Path | None, text: str) -> None:
    """``text`` into ``path`` (when given), whole or not at all."""
    if path is not None:
        write_output(path, text, "--json")
