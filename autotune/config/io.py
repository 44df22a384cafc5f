"""Reading and writing configuration YAML at the edge: raw dicts never travel further inward."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from autotune.boundedread import METADATA_BYTES, read_bytes
from autotune.config._strict import from_dict, to_dict
from autotune.config.training import TrainConfig
from autotune.errors import ConfigError

T = TypeVar("T")


def read_yaml(path: str | os.PathLike) -> Any:
    """Parse a YAML file strictly; every problem is one line naming the file.

    Refused: a missing or unreadable file, bytes that are not UTF-8 text (a binary file), a file
    with no YAML document (empty, or only comments: never "all defaults" by accident), a syntax
    error, a key given twice in one mapping (PyYAML would keep the last one silently), nesting
    deeper than Python's stack, and aliases that expand past :data:`MAX_NODES` (a "billion laughs"
    file of a few hundred bytes is a billion values to every reader that walks it).
    """
    path = Path(path)
    try:
        raw = read_bytes(path, METADATA_BYTES, ConfigError)  # a regular file, never /dev/zero
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a YAML file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not a text file (byte {exc.start} is not UTF-8); expected YAML text"
        ) from None
    return parse_yaml(text, path)


def parse_yaml(text: str, path: str | os.PathLike) -> Any:
    """The YAML document ``text`` (read from ``path``, which the errors name), as strictly as
    :func:`read_yaml` parses a file."""
    data = _parse(text, Path(path))
    if data is _EMPTY:
        raise ConfigError(
            f"{path}: the file is empty (no YAML document in it); expected a mapping of keys"
        )
    return data


_EMPTY = object()

MAX_NODES = 100_000
"""Values a YAML document may hold with its aliases expanded: a configuration or a search space
holds hundreds."""


def _parse(text: str, path: Path) -> Any:
    try:  # the reader refuses control characters as it is made, before any node is read
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {_problem(exc)}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return _EMPTY
        _check_unique_keys(node, path, "", set())
        _check_expanded_size(node, path)
        return loader.construct_document(node)
    except RecursionError:  # the composer recurses per level: no configuration nests so deep
        raise ConfigError(
            f"{path}: nests lists or mappings deeper than can be read; a configuration nests a few levels"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {_problem(exc)}") from None
    finally:
        loader.dispose()


def _problem(exc: yaml.YAMLError) -> str:
    """What PyYAML says is wrong, in one line (a reader error names the character, with its line)."""
    if isinstance(exc, yaml.reader.ReaderError) and isinstance(exc.character, int):
        return f"character #x{exc.character:04x} at offset {exc.position} ({exc.reason}); a configuration is printable text"
    return getattr(exc, "problem", None) or str(exc).splitlines()[0]


def _check_unique_keys(node: yaml.Node, path: Path, prefix: str, seen: set[int]) -> None:
    """Walk the composed document: a mapping may not give one key twice (merge keys ``<<`` may
    be overridden, as YAML allows). Keys are named dotted from the top, like every config error."""
    if id(node) in seen:  # an alias of a node already checked (or of one of its parents)
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines: dict[tuple[str, str], int] = {}
        for key, value in node.value:
            name = f"{prefix}.{key.value}" if prefix else str(key.value)
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if (key.tag, key.value) in lines:
                    raise ConfigError(f"{path}: {name}: duplicate key at line {key.start_mark.line + 1} "
                                      f"(first at line {lines[key.tag, key.value]}); a key may appear once")  # fmt: skip
                lines[key.tag, key.value] = key.start_mark.line + 1
            _check_unique_keys(value, path, name, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_unique_keys(item, path, f"{prefix}[{i}]", seen)


def _check_expanded_size(node: yaml.Node, path: Path) -> None:
    """Count the values of the document as its readers will see them, each alias as a copy of
    its anchor (counted once per anchor, so the count costs the file's size, not the expansion)."""
    sizes: dict[int, int] = {}

    def size(n: yaml.Node) -> int:
        if id(n) not in sizes:
            sizes[id(n)] = 0  # an anchor inside itself adds nothing more
            if isinstance(n, yaml.MappingNode):
                children = [c for pair in n.value for c in pair]
            else:
                children = n.value if isinstance(n, yaml.SequenceNode) else []
            sizes[id(n)] = min(1 + sum(size(c) for c in children), MAX_NODES + 1)
        return sizes[id(n)]

    if size(node) > MAX_NODES:
        raise ConfigError(
            f"{path}: its aliases (*name) expand to more than {MAX_NODES} values; a configuration "
            "holds hundreds (is it an alias bomb?)"
        )


def load_config(path: str | os.PathLike, cls: type[T] = TrainConfig) -> T:  # type: ignore[assignment]
    """Load a configuration file strictly; every error names the file and the dotted key."""
    data = read_yaml(path)
    try:
        return from_dict(cls, data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def config_from_dict(data: dict[str, Any], cls: type[T] = TrainConfig) -> T:  # type: ignore[assignment]
    return from_dict(cls, data)


def load_config_as(path: str | os.PathLike, workload: str) -> TrainConfig:
    """The configuration file ``path`` read as one of ``workload`` (``--workload`` over its own line):
    its model knobs are checked against that workload's, as a file naming it would be."""
    data = to_dict(load_config(path))
    try:
        return from_dict(TrainConfig, {**data, "workload": workload})
    except ConfigError as exc:
        raise ConfigError(f"{path} (as --workload {workload}): {exc}") from None


def dump_config(cfg: Any) -> str:
    """The YAML text of a configuration (field order kept)."""
    return yaml.safe_dump(to_dict(cfg), sort_keys=False, default_flow_style=False)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: never a half-written file.

    A device, pipe or socket at ``path`` (or at the end of a link there) is refused: the rename
    would replace it (``--out /dev/null`` run as root replaced the system's /dev/null)."""
    path = Path(path)
    _check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, _mode_for(path))
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:  # a full disk's error names no file (a rename's names the temporary one)
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


TEMPORARY = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}")
"""The name of :func:`write_text_atomic`'s temporary file of ``name`` (``tempfile.mkstemp``'s 8 characters)."""


def remove_stale_temporaries(
    folder: Path, names: Iterable[str], older_than_s: float = 60.0
) -> None:
    """Remove the temporary files of ``names`` that :func:`write_text_atomic` left in ``folder`` when
    its writer was killed between writing one and renaming it (``.best.yaml.k2j3h4x_``, a whole
    report.html that nothing would ever remove); for the folder's owner, once it holds the folder. One
    changed in the last ``older_than_s`` seconds may be another command's write in progress (``autotune
    report`` of a running study): it stays."""
    wanted = set(names)
    try:
        entries = list(os.scandir(folder))
    except OSError:  # a folder that cannot be listed has nothing to clean
        return
    for entry in entries:
        match = TEMPORARY.fullmatch(entry.name)
        if match is None or match["name"] not in wanted:
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to remove
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(info.st_mode) and time.time() - info.st_mtime > older_than_s:
                os.unlink(entry.path)


def _check_replaceable(path: Path) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError:  # nothing there (or a broken link): the rename makes the file
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # a folder: the rename's own error
        raise OSError(
            errno.EINVAL,
            "a device, pipe or socket is there, not a file; it is never replaced",
            str(path),
        )


def _mode_for(path: Path) -> int:
    """The permissions ``path`` is written with: those of the file it replaces, else what ``open``
    would give a new file (the temporary file's own 0600 would hide a report or a dataset's
    metadata from everyone else who reads them)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    try:  # read, not set: setting it, even back, would race other threads creating files
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


def save_config(cfg: Any, path: str | os.PathLike) -> None:
    write_text_atomic(path, dump_config(cfg))


def output_folder(path: str | os.PathLike, flag: str = "--out") -> Path:
    """``path`` as a folder to write into, created if needed; a file there, or a place that cannot
    be written, is a ConfigError naming ``flag``."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(
            f"{flag} {path}: is a file, not a folder; give a folder (it is created if needed)"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"{flag} {path}: cannot create the folder ({exc.strerror}); give one you can write"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{flag} {path}: the folder cannot be written (permission denied); give one you can write"
        )
    return path


def write_output(path: str | os.PathLike, text: str, flag: str = "--out") -> None:
    """:func:`write_text_atomic` to a file the user named; a folder there, or a place that cannot
    be written, is a ConfigError naming ``flag``."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(
            f"{flag} {path}: is a folder; give the file to write (e.g. {path / 'report.html'})"
        )
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise ConfigError(
            f"{flag} {path}: cannot write the file ({exc.strerror}); give a place you can write"
        ) from None
