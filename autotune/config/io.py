"""Reading and writing configuration YAML at the edge: raw dicts never travel further inward."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, TypeVar

import yaml

from autotune.config._strict import from_dict, to_dict
from autotune.config.training import TrainConfig
from autotune.errors import ConfigError

T = TypeVar("T")


def read_yaml(path: str | os.PathLike) -> Any:
    """Parse a YAML file; a missing file or a syntax error names the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None


def load_config(path: str | os.PathLike, cls: type[T] = TrainConfig) -> T:  # type: ignore[assignment]
    """Load a configuration file strictly; every error names the file and the dotted key."""
    data = read_yaml(path)
    try:
        return from_dict(cls, data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def config_from_dict(data: dict[str, Any], cls: type[T] = TrainConfig) -> T:  # type: ignore[assignment]
    return from_dict(cls, data)


def dump_config(cfg: Any) -> str:
    """The YAML text of a configuration (field order kept)."""
    return yaml.safe_dump(to_dict(cfg), sort_keys=False, default_flow_style=False)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_config(cfg: Any, path: str | os.PathLike) -> None:
    write_text_atomic(path, dump_config(cfg))
