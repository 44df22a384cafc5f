"""A training job's checkpoints: ``D/checkpoint-<step>/``, each written whole or not at all.

==========================  =======================================================================
file                        what
==========================  =======================================================================
``model.safetensors``       the trainable parameters, under the workload's parameter names
``optimizer.pt``            the optimizer's state dict (``torch.save``)
``scheduler.pt``            the learning-rate schedule's state dict
``rng_state.pt``            every rank's random states: Python, NumPy, torch's CPU and CUDA
                            generators (the CUDA one is the generator the captured graphs draw from)
``config.yaml``             the configuration trained
``trainer_state.json``      the step, the data position, the weights the job started from, and the
                            size and SHA-256 of every file above; written last
==========================  =======================================================================

A checkpoint is written into ``D/.checkpoint-<step>.tmp`` (every file synced to disk) and renamed
to ``D/checkpoint-<step>`` when complete; only rank 0 writes. A checkpoint whose
``trainer_state.json`` is missing or unreadable (or edited: a step, data position or
``--init-from`` record of the wrong kind, a step other than its folder's, a file named outside
it), whose files differ in size or in SHA-256 from it (bytes changed in place: a bad disk, a stray
write), or whose files do not load, is corrupt: :func:`latest` skips it with a one-line warning
and takes the one before, so a rerun resumes from the newest state that is intact instead of
training on damaged weights. So is one whose files load but do not fit the job that resumes it
(:mod:`~autotune.train.job.usable`, the check the job hands :func:`latest`).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from autotune.boundedread import METADATA_BYTES
from autotune.durable import fsync, sync_folder
from autotune.errors import (
    AutotuneError,
    ConfigError,
    first_line,
    free_space,
    short_repr,
    size_text,
)

PREFIX = "checkpoint-"
WEIGHTS, OPTIMIZER, SCHEDULER, RNG = (
    "model.safetensors",
    "optimizer.pt",
    "scheduler.pt",
    "rng_state.pt",
)
CONFIG, STATE = "config.yaml", "trainer_state.json"
_NAME = re.compile(rf"{PREFIX}(\d+)\Z")


class CorruptCheckpoint(AutotuneError):
    """A checkpoint folder that is incomplete or does not load."""


@dataclass
class Snapshot:
    """A checkpoint's content in host memory, taken at a step boundary."""

    step: int
    weights: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    rng: list[dict[str, Any]]
    """One entry per rank."""
    state: dict[str, Any]
    """JSON-able: the step, data position, config, ... (``trainer_state.json`` less the file sizes)."""
    config_yaml: str


@dataclass(frozen=True)
class Loaded:
    path: Path
    step: int
    weights: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    rng: list[dict[str, Any]]
    state: dict[str, Any]


@dataclass
class WriteRecord:
    """What one checkpoint cost: the stall at the step boundary, the write beside training."""

    step: int
    path: str
    bytes: int = 0
    snapshot_s: float = 0.0
    """Seconds the training loop stopped for (the device synchronised, the state copied to host)."""
    write_s: float = 0.0
    """Seconds the background write took (files, fsync, rename)."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def step_of(path: Path) -> int | None:
    """The step of a folder named as a checkpoint (``checkpoint-<step>``); None for another name."""
    m = _NAME.match(path.name)
    return int(m.group(1)) if m else None


PARTIAL = f".{PREFIX}*.tmp"
"""The names of the temporary folders checkpoints are written in (a glob)."""


def is_partial(path: Path) -> bool:
    """``path`` is named as the temporary folder of a checkpoint (:data:`PARTIAL`)."""
    return fnmatch.fnmatchcase(path.name, PARTIAL)


def checkpoints(output_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoint folders in ``output_dir`` by step, oldest first."""
    if not output_dir.is_dir():
        return []
    found = [
        (step, p) for p in output_dir.iterdir() if p.is_dir() and (step := step_of(p)) is not None
    ]
    return sorted(found)


def enclosing(path: Path) -> Path | None:
    """The checkpoint folder of a job that ``path`` is (or is inside), if any: what is written
    there goes when the job rotates or rewrites its checkpoints."""
    for folder in [path, *path.parents]:
        if step_of(folder) is not None and (folder / STATE).is_file():
            return folder
    return None


def check_outside(path: Path, flag: str) -> None:
    """ConfigError naming ``flag`` when ``path`` is inside a job's checkpoint (:func:`enclosing`)."""
    folder = enclosing(Path(os.path.abspath(path)))
    if folder is not None:
        raise ConfigError(
            f"{flag} {path}: inside the checkpoint {folder} of a job, which the job deletes when it "
            "rotates or rewrites its checkpoints; give a folder outside it"
        )


def write(snapshot: Snapshot, output_dir: Path) -> tuple[Path, int]:
    """Write ``snapshot`` as ``output_dir/checkpoint-<step>``; returns (folder, bytes written). A write
    that fails removes its temporary folder: on a full disk, what it held would keep the disk full
    for the rerun that resumes from the checkpoint before."""
    final = output_dir / f"{PREFIX}{snapshot.step}"
    tmp = output_dir / f".{PREFIX}{snapshot.step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        files = _write_files(snapshot, tmp)
        _replace(tmp, final)
    except BaseException as exc:
        free = _free_space(output_dir)  # before the partial folder goes: a full disk shows as ~0
        shutil.rmtree(tmp, ignore_errors=True)
        if not isinstance(exc, Exception):
            raise
        reason = first_line(exc)
        raise AutotuneError(
            f"writing {final} failed ({type(exc).__name__}: {reason}){free}; the checkpoints "
            "before it are intact"
        ) from exc
    fsync(output_dir)
    return final, sum(files.values()) + (final / STATE).stat().st_size


def _replace(tmp: Path, final: Path) -> None:
    """``tmp`` renamed to ``final``; a checkpoint of the same step there (a job resumed past it)
    goes first: the new one stands."""
    if final.exists() or final.is_symlink():
        shutil.rmtree(final)  # a link there raises: what it leads to is never deleted
    tmp.rename(final)


def _write_files(snapshot: Snapshot, tmp: Path) -> dict[str, int]:
    """Every file of the checkpoint into ``tmp``, ``trainer_state.json`` last, all synced to disk;
    the size of each but the state."""
    tmp.mkdir(parents=True)
    save_file(snapshot.weights, tmp / WEIGHTS, metadata={"format": "pt"})
    torch.save(snapshot.optimizer, tmp / OPTIMIZER)
    torch.save(snapshot.scheduler, tmp / SCHEDULER)
    torch.save(snapshot.rng, tmp / RNG)
    (tmp / CONFIG).write_text(snapshot.config_yaml)
    # safetensors writes 0600; the checkpoint's other files have the umask's mode
    shutil.copymode(tmp / CONFIG, tmp / WEIGHTS)
    files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
    sums = {name: sha256(tmp / name) for name in files}
    state = {**snapshot.state, "files": files, "sha256": sums}
    (tmp / STATE).write_bytes(_encode_state(state))
    sync_folder(tmp)
    return files


def sha256(path: Path) -> str:
    """The SHA-256 of a file, read in blocks (a checkpoint's optimizer state is gigabytes)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


STATE_MAX_BYTES = METADATA_BYTES
"""The most ``trainer_state.json`` may hold: the configuration it records (a provenance of
megabytes) as large as a configuration file may be, and its other fields."""
STATE_ROOM = 1 << 16
"""What the state holds beside its configuration (the step, the data position, every file's size
and SHA-256): a few kilobytes."""


def _encode_state(state: dict[str, Any]) -> bytes:
    """``trainer_state.json``'s bytes; an error where :func:`read_state` would refuse them."""
    data = (json.dumps(state, indent=1) + "\n").encode()
    if len(data) > STATE_MAX_BYTES:
        raise AutotuneError(
            f"its {STATE} would take {size_text(len(data))}, more than the "
            f"{size_text(STATE_MAX_BYTES)} a checkpoint's state may hold"
        )
    return data


def check_config_fits(config: dict[str, Any]) -> None:
    """``ConfigError`` where ``config`` (``to_dict`` of the job's configuration) would leave a
    checkpoint's state larger than :func:`read_state` takes: the job could not resume from it."""
    size = len(json.dumps({"config": config}, indent=1).encode())  # nested as the state nests it
    room = STATE_MAX_BYTES - STATE_ROOM
    if size > room:
        key = max(config, key=lambda k: len(json.dumps(config[k])))
        raise ConfigError(
            f"config: {key}: {size_text(len(json.dumps(config[key])))} as a checkpoint's {STATE} "
            f"records it, where the whole configuration may take at most {size_text(room)}: a job "
            "could not resume from its checkpoints; make it smaller"
        )


def read_state(folder: Path) -> dict[str, Any]:
    """``trainer_state.json`` of a checkpoint whose files are all there, at their sizes."""
    from autotune.boundedread import read_bytes

    try:
        state = json.loads(read_bytes(folder / STATE, STATE_MAX_BYTES))
        files = state["files"]
        files.items()
    # RecursionError: JSON nested deeper than Python's stack
    except (
        AutotuneError,
        OSError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        RecursionError,
    ) as exc:
        raise CorruptCheckpoint(
            f"{folder / STATE} is missing or unreadable ({type(exc).__name__})"
        ) from None
    _check_fields(folder, state)
    for name, size in files.items():
        path = folder / name
        actual = path.stat().st_size if path.is_file() else None
        if actual != size:
            got = "missing" if actual is None else f"{actual} bytes"
            raise CorruptCheckpoint(f"{path} is {got}, {STATE} says {size} bytes")
    return state


COUNT_END = 2**63
"""A step or a data position is below it: a loader skips to a position with ``itertools.islice``,
which takes no more."""


def _count(value: Any) -> bool:
    """A step or a data position: an integer that fits in 64 bits (``COUNT_END``), at least zero."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < COUNT_END


def _check_fields(folder: Path, state: dict[str, Any]) -> None:
    """The fields a resume and an export read: a state edited by hand (nothing checks its own bytes)
    is refused here, not as a traceback (or a sampler that never starts) deep in the job."""
    where = folder / STATE
    step = state.get("step")
    if not _count(step):
        raise CorruptCheckpoint(
            f"{where}: step: {short_repr(step)} is not a step (an integer >= 0 of 64 bits)"
        )
    data = state.get("data")
    draw = data.get("next_draw") if isinstance(data, dict) else None
    if not _count(draw):
        raise CorruptCheckpoint(
            f"{where}: data.next_draw: {short_repr(draw)} is not a data position (an integer >= 0 of 64 bits)"
        )
    for name in state["files"]:  # each is hashed: never a file outside the folder
        if not isinstance(name, str) or Path(name).name != name or name in (".", ".."):
            raise CorruptCheckpoint(
                f"{where}: files: {short_repr(name)} is not the name of a file of the checkpoint"
            )
    init = state.get("init_from")
    if init and not (
        isinstance(init, dict)
        and isinstance(init.get("path"), str)
        and isinstance(init.get("fingerprint"), str)
    ):
        raise CorruptCheckpoint(
            f"{where}: init_from: {short_repr(init)} is not null or {{path, fingerprint}} of a folder"
        )


def verify(folder: Path, state: dict[str, Any]) -> None:
    """Every file's SHA-256 against ``trainer_state.json`` (a checkpoint written before the sums
    were recorded is checked by size only)."""
    sums = state.get("sha256")
    if not isinstance(sums, dict):
        return
    if set(sums) != set(state["files"]):  # each name is read to its end: never /dev/zero
        raise CorruptCheckpoint(f"{folder / STATE}: sha256: names other files than its files")
    for name, expected in sums.items():
        if sha256(folder / name) != expected:
            raise CorruptCheckpoint(
                f"{folder / name}: its bytes changed since it was written (SHA-256 differs from {STATE})"
            )


def load(folder: Path) -> Loaded:
    """Every part of the checkpoint in ``folder``, in host memory; ``CorruptCheckpoint`` if any part fails."""
    state = read_state(folder)
    verify(folder, state)
    try:
        weights = load_file(folder / WEIGHTS)
        optimizer = torch.load(folder / OPTIMIZER, map_location="cpu", weights_only=True)
        scheduler = torch.load(folder / SCHEDULER, map_location="cpu", weights_only=True)
        rng = torch.load(folder / RNG, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001  any failure to read means: not this checkpoint
        raise CorruptCheckpoint(
            f"{folder} does not load ({type(exc).__name__}: {first_line(exc)})"
        ) from None
    return Loaded(folder, state["step"], weights, optimizer, scheduler, rng, state)


def latest(
    output_dir: Path,
    warn: Callable[[str], None],
    *,
    at: int | None = None,
    check: Callable[[Loaded], None] | None = None,
) -> Loaded | None:
    """The newest checkpoint of ``output_dir`` that loads and passes ``check`` (or the one of step
    ``at``); each newer one that does not (``CorruptCheckpoint``) is skipped with a warning. None
    where there is none; ``ConfigError`` where there are some and none is usable: a job that
    started afresh would write its own over them."""
    skipped: list[CorruptCheckpoint] = []
    for step, path in reversed(checkpoints(output_dir)):
        if at is not None and step != at:
            continue
        try:
            loaded = load(path)
            if loaded.step != step:  # a state edited, or copied from another checkpoint
                raise CorruptCheckpoint(
                    f"{path / STATE}: step: {loaded.step} is not the step of its folder ({step})"
                )
            if check is not None:
                check(loaded)
            return loaded
        except CorruptCheckpoint as exc:
            warn(f"skipping checkpoint {path}: {exc}")
            skipped.append(exc)
    if skipped and at is None:
        raise ConfigError(
            f"--output-dir {output_dir}: none of its {len(skipped)} checkpoints can be resumed "
            f"from (the newest: {skipped[0]}); training from step 1 would write over them: move "
            "them out of it to start afresh, or give another --output-dir"
        )
    return None


def rotate(output_dir: Path, limit: int | None, keep: Path) -> list[Path]:
    """Delete the oldest complete checkpoints beyond ``limit`` (never ``keep``); returns them."""
    if not limit:
        return []
    found = [p for _, p in checkpoints(output_dir)]
    old = [p for p in found[: max(0, len(found) - limit)] if p != keep]
    for p in old:
        shutil.rmtree(p, ignore_errors=True)
    return old


def remove_partial(output_dir: Path) -> None:
    """Temporary folders of checkpoints a killed job did not finish."""
    if output_dir.is_dir():
        for p in output_dir.glob(PARTIAL):
            if p.is_symlink():  # never what it leads to
                p.unlink()
            else:
                shutil.rmtree(p, ignore_errors=True)


@dataclass
class Writer:
    """Writes snapshots in a background thread, one at a time, beside training.

    ``submit`` waits for the previous write (so at most one snapshot is held), then starts this
    one; ``wait`` joins the write in flight. A failed write is raised by the next ``submit`` or
    ``wait``: the checkpoints written before it are intact.
    """

    output_dir: Path
    limit: int | None = None
    records: list[WriteRecord] = field(default_factory=list)
    finished: list[WriteRecord] = field(default_factory=list)
    """The records of the writes that completed, in order (appended by the writing thread)."""
    _thread: threading.Thread | None = None
    _error: tuple[int, BaseException] | None = None
    """(step, what its write raised)."""

    def submit(self, snapshot: Snapshot, record: WriteRecord) -> None:
        self.wait()
        self.records.append(record)
        self._thread = threading.Thread(
            target=self._run, args=(snapshot, record), name="autotune-checkpoint", daemon=True
        )
        self._thread.start()

    def _run(self, snapshot: Snapshot, record: WriteRecord) -> None:
        start = time.perf_counter()
        try:
            path, size = write(snapshot, self.output_dir)
            rotate(self.output_dir, self.limit, keep=path)
            record.path, record.bytes = str(path), size
            record.write_s = time.perf_counter() - start
            self.finished.append(record)
        except BaseException as exc:  # noqa: BLE001  raised in the training thread by wait()
            self._error = (snapshot.step, exc)
            record.write_s = time.perf_counter() - start

    def join(self) -> None:
        """Wait for the write in flight and leave a failure of it to ``wait``: a job that is
        failing already reports its own error, not this one."""
        if self._thread is not None:
            self._thread.join()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            (step, exc), self._error = self._error, None
            if isinstance(exc, AutotuneError):
                # a new one: raised again, the stored one and this frame would hold each other
                # (and the training loop's frames) until the garbage collector runs
                raise AutotuneError(str(exc))
            reason = first_line(exc)
            raise AutotuneError(
                f"writing {self.output_dir / f'{PREFIX}{step}'} failed ({type(exc).__name__}: "
                f"{reason}); the checkpoints before it are intact"
            )


def _free_space(folder: Path) -> str:
    """``, N MiB free there when it failed``: a full disk shows in torch's error only as a wrong
    file position."""
    free = free_space(folder)
    return f"{free} when it failed" if free else ""
