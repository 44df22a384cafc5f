"""Hugging Face's safetensors checkpoint layout: ``model.safetensors.index.json`` and its shards.

The index is ``{"metadata": {"total_size": BYTES}, "weight_map": {key: shard file}}``; each shard
is a safetensors file (``model-00001-of-00003.safetensors``) beside the index: an index that names
another path (``../x``, ``/etc/x``) is refused before anything is opened. A folder with a single
``model.safetensors`` and no index (what ``save_pretrained`` writes for a small model) reads too;
one with both is refused, as it is not clear which it holds (transformers reads the single file,
other readers the index). Reading the layout opens only the shards' headers: shapes and dtypes are
checked before any tensor is read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from autotune.boundedread import check_regular, read_text
from autotune.durable import fsync, sync_folder
from autotune.errors import NAME_CHARS, DataError, first_line, short_repr
from autotune.weights import unfinished

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
DEFAULT_SHARD_BYTES = 5 * 10**9
"""``save_pretrained``'s default ``max_shard_size`` ("5GB")."""


@dataclass(frozen=True)
class TensorInfo:
    key: str
    path: Path
    shape: tuple[int, ...]
    dtype: str
    """safetensors' dtype name (``BF16``, ``F32``, ...)."""


def _weight_map(folder: Path) -> dict[str, str] | None:
    if not folder.is_dir():  # a shard given for its folder reads here first (a job's fingerprint)
        raise DataError(
            f"{folder}: not a folder (give the checkpoint's folder, which holds {INDEX})"
        )
    unfinished.check_finished(folder)
    index, single = folder / INDEX, folder / SINGLE
    has_index, has_single = _present(index), _present(single)
    if has_index and has_single:
        raise DataError(
            f"{folder}: holds both {INDEX} and {SINGLE}, two checkpoints; allowed: one of them "
            "(move the other away)"
        )
    if not has_index:
        if has_single:
            return None
        raise DataError(
            f"{folder}: neither {INDEX} nor {SINGLE} is there (a Hugging Face checkpoint folder has one)"
        )
    weight_map = _read_index(index)
    for name in sorted(set(weight_map.values())):
        if Path(name).name != name or name in ("", ".", ".."):
            raise DataError(
                f"{index}: shard {short_repr(name)} is not a file name; allowed: a shard beside "
                "the index, such as model-00001-of-00002.safetensors"
            )
    return weight_map


def _present(path: Path) -> bool:
    """True where ``path`` is a regular file (links followed), False where nothing is there; else
    a DataError saying what is there instead (a folder, a pipe, a device such as ``/dev/zero``) or
    what the system said."""
    try:
        check_regular(path, DataError)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _unreadable(path, exc) from None
    return True


def _unreadable(path: Path, exc: OSError) -> DataError:
    return DataError(f"{path}: cannot be read ({exc.strerror or exc})")


def _read_index(index: Path) -> dict[str, str]:
    """The index's map of key -> shard file name."""
    try:
        data = json.loads(read_text(index, error=DataError))
    except OSError as exc:  # one its user may not read: not the same as one that is no index
        raise _unreadable(index, exc) from None
    except ValueError:  # not JSON, not UTF-8
        data = None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not (isinstance(weight_map, dict) and all(isinstance(v, str) for v in weight_map.values())):
        raise DataError(f"{index}: not an index of shards (needs a 'weight_map' of key -> file)")
    return weight_map


def _files(folder: Path, weight_map: dict[str, str] | None) -> list[Path]:
    """The checkpoint's files: the shards the index names (each there), or the single file."""
    names = sorted(set(weight_map.values())) if weight_map is not None else [SINGLE]
    for name in names:
        if not _present(folder / name):
            raise DataError(f"{folder / INDEX}: shard {short_repr(name)} is missing")
    return [folder / name for name in names]


def weight_files(folder: str | os.PathLike) -> list[Path]:
    """The checkpoint's own files in ``folder``: its index and the shards it names, or its single
    file."""
    folder = Path(folder)
    weight_map = _weight_map(folder)
    return _files(folder, weight_map) + ([folder / INDEX] if weight_map is not None else [])


def read_layout(folder: str | os.PathLike) -> dict[str, TensorInfo]:
    """Every tensor of the checkpoint in ``folder``: its shard, shape and dtype (headers only)."""
    folder = Path(folder)
    weight_map = _weight_map(folder)
    infos: dict[str, TensorInfo] = {}
    for path in _files(folder, weight_map):
        try:  # safetensors says "No such file" of a file its user may not read
            open(path, "rb").close()
        except OSError as exc:
            raise _unreadable(path, exc) from None
        try:
            with safe_open(path, framework="pt") as f:
                for key in f.keys():  # noqa: SIM118  (a safe_open handle has no __iter__)
                    piece = f.get_slice(key)
                    infos[key] = TensorInfo(key, path, tuple(piece.get_shape()), piece.get_dtype())
        except Exception as exc:  # noqa: BLE001  safetensors raises its own error types, and OSError
            raise DataError(
                f"{path}: not a readable safetensors file ({str(exc).splitlines()[0]})"
            ) from None
    if weight_map is not None:
        astray = sorted(
            k for k, f in weight_map.items() if k not in infos or infos[k].path.name != f
        )
        if astray:
            raise DataError(
                f"{folder / INDEX}: {len(astray)} keys are not in the shard the index names, "
                f"e.g. {short_repr(astray[0], NAME_CHARS)}"
            )
    return infos


def read_tensors(
    infos: dict[str, TensorInfo], keys: list[str]
) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors of ``keys``, shard by shard (each shard opened once)."""
    by_file: dict[Path, list[str]] = {}
    for key in keys:
        by_file.setdefault(infos[key].path, []).append(key)
    for path, names in by_file.items():
        with safe_open(path, framework="pt") as f:
            for key in names:
                yield key, f.get_tensor(key)


def fingerprint(folder: str | os.PathLike) -> str:
    """A short hash of the checkpoint's weight map (where it has an index) and its weight files'
    names and sizes: what a resumed job and an export check to know they read the checkpoint the job
    started from. It reads no weights, so another revision of the same model (the same keys, shapes
    and dtypes, other values) has the same fingerprint."""
    folder = Path(folder)
    h = hashlib.sha256()
    weight_map = _weight_map(folder)
    if weight_map is not None:
        h.update(json.dumps(weight_map, sort_keys=True).encode())
    for path in _files(folder, weight_map):
        h.update(f"{path.name}:{path.stat().st_size}".encode())
    return h.hexdigest()[:16]


def write_checkpoint(
    tensors: dict[str, torch.Tensor],
    out: str | os.PathLike,
    *,
    max_shard_bytes: int = DEFAULT_SHARD_BYTES,
    extra_files: Sequence[Path] = (),
) -> dict:
    """Write ``tensors`` as shards and their index, and a copy of each of ``extra_files`` (a
    ``config.json``), into the new or empty folder ``out``.

    The files are written into a hidden folder inside ``out`` (on its disk, whatever is mounted
    there, and with no right to write beside it needed), synced to disk, and moved up into ``out``
    when all are written, the index last: a crash never leaves an index naming a shard that is not
    whole. A write that fails (a full disk) removes what it wrote, and ``out`` where it made it,
    and is a DataError naming ``out``; what a killed write left there (its staging folder, the files
    it had moved in, which :mod:`~autotune.weights.unfinished` marks) is removed by the next write
    into ``out``. Returns the index.
    """
    shown = out
    out = Path(os.path.abspath(out))  # ``.``: its files are moved into it, the folder stays
    made = not out.exists()
    if not made:
        _clear_for_writing(out, shown)
    unfinished.remove_old_staging(out)  # a killed export's copy of a checkpoint: gigabytes
    staging = out / f"{STAGING_PREFIX}{socket.gethostname()}-{os.getpid()}"
    try:
        staging.mkdir(parents=True)
        index = _write_shards(tensors, staging, max_shard_bytes)
        for f in extra_files:
            shutil.copy2(f, staging / f.name)
        sync_folder(staging)
        _move_in(staging, out)
    except BaseException as exc:  # a full disk (safetensors has its own error type), Ctrl-C
        shutil.rmtree(staging, ignore_errors=True)
        if made:
            with contextlib.suppress(OSError):
                out.rmdir()
        if not isinstance(exc, Exception):
            raise
        reason = first_line(exc) or type(exc).__name__
        raise DataError(
            f"{shown}: writing the checkpoint failed ({reason}); nothing was written there"
        ) from exc
    return index


STAGING_PREFIX = ".autotune-staging-"
"""Begins the name of the hidden folder a write stages its files in, inside the folder it writes
(``<prefix><host>-<pid>``): the next write there tells whether the one that left it still runs."""
_STAGING = re.compile(rf"{re.escape(STAGING_PREFIX)}(.+)-(\d+)\Z")


def _clear_for_writing(out: Path, shown: str | os.PathLike) -> None:
    """``out`` is a folder that holds nothing but what killed writes left (their staging folders,
    the files they had moved in: :mod:`~autotune.weights.unfinished`), which is removed; else a
    DataError naming it (and the process of a write that still runs there)."""
    if not out.is_dir():
        raise DataError(f"{shown}: exists and is not an empty folder; give a new folder")
    left = unfinished.leftover(out, shown)
    if left is not None:
        _check_ended(left.host, left.pid, shown)
    theirs = {unfinished.MARKER, *(f.name for f in left.files)} if left else set()
    entries = [e for e in out.iterdir() if e.name not in theirs]
    for entry in entries:
        m = _STAGING.match(entry.name)
        if m is None or not entry.is_dir() or entry.is_symlink():
            raise DataError(_not_empty(shown, entry, left))
        _check_ended(m.group(1), int(m.group(2)), shown)
    for entry in entries:
        shutil.rmtree(entry)
    if left is not None:
        unfinished.remove(out, left)


def _check_ended(host: str, pid: int, shown: str | os.PathLike) -> None:
    if unfinished.writer_alive(host, pid):
        raise DataError(
            f"{shown}: another write (process {pid} on host {short_repr(host)}) is putting a "
            "checkpoint there; give another folder, or wait for it to end"
        )


def _not_empty(shown: str | os.PathLike, entry: Path, left: unfinished.Leftover | None) -> str:
    if left is None:
        return f"{shown}: exists and is not an empty folder; give a new folder"
    return (
        f"{shown}: holds {short_repr(entry.name)}, which the export that did not finish there "
        "did not write; move it out, or give a new folder"
    )


def _move_in(staging: Path, out: Path) -> None:
    """The files of ``staging`` moved up into ``out``: the index last, once the shards' new names
    are on disk; then ``staging`` removed. The marker of :mod:`~autotune.weights.unfinished` is in
    ``out`` from before the first move until the index is in."""
    files = sorted(staging.iterdir(), key=lambda f: f.name == INDEX)
    moved: list[Path] = []
    try:
        unfinished.begin(out, staging, files)
        for f in files:
            if f.name == INDEX:
                fsync(out)
            f.rename(out / f.name)
            moved.append(out / f.name)
        fsync(out)  # the index is in before the marker goes
        staging.rmdir()
        unfinished.end(out)
    except BaseException:
        for f in moved:
            f.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # the error that stopped the moves is the one to tell
            (out / unfinished.MARKER).unlink(missing_ok=True)
        raise


def _shards(tensors: dict[str, torch.Tensor], max_shard_bytes: int) -> list[list[str]]:
    """The keys of each shard, in order: a shard is closed before it would pass ``max_shard_bytes``."""
    groups: list[list[str]] = [[]]
    size = 0
    for key in tensors:
        n = tensors[key].numel() * tensors[key].element_size()
        if groups[-1] and size + n > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(key)
        size += n
    return groups


def _write_shards(tensors: dict[str, torch.Tensor], folder: Path, max_shard_bytes: int) -> dict:
    """The shards and the index of ``tensors`` in ``folder``; returns the index."""
    groups = _shards(tensors, max_shard_bytes)
    weight_map, total = {}, 0
    for n, keys in enumerate(groups, 1):
        name = f"model-{n:05d}-of-{len(groups):05d}.safetensors"
        save_file(
            {k: tensors[k].contiguous() for k in keys}, folder / name, metadata={"format": "pt"}
        )
        weight_map.update({k: name for k in keys})
        total += sum(tensors[k].numel() * tensors[k].element_size() for k in keys)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (folder / INDEX).write_text(json.dumps(index, indent=2) + "\n")
    for name in set(weight_map.values()):  # safetensors writes 0600; the index has the umask's mode
        shutil.copymode(folder / INDEX, folder / name)
    return index
