"""``autotune data make``: write a synthetic dataset in a LeRobot layout (v2.1 or v3.0).

    python -m autotune data make /tmp/ds --episodes 8 --views 2 --size 256 --seed 0
    python -m autotune data make /tmp/ds3 --episodes 8 --format v3.0 --codec av1

The files are those the lerobot library writes for its codebase version (writers.py), plus, unless
``--no-extras``, GR00T's ``meta/modality.json`` and autotune's ``meta/tokenizer.json`` and
info.json ``embodiment``. The same arguments give the same parquet bytes and the same decoded
frames; the dataset appears at once (written aside, then renamed).
"""

from __future__ import annotations

import math
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autotune.data.content import (
    EMBODIMENTS,
    PROJECTOR_SLOTS,
    VIEW_NAMES,
    Embodiment,
    FrameRenderer,
    make_tasks,
    rng_for,
    trajectory,
)
from autotune.data.encode import CODECS
from autotune.data.layout import INFO
from autotune.data.writers import writer_for
from autotune.errors import DataError, size_text

FORMATS = ("v2.1", "v3.0")
MAX_EPISODES = 1_000_000
"""Episodes a made dataset may hold (the largest LeRobot datasets hold a few hundred thousand)."""
MAX_FRAMES = 100_000
"""Frames of one made episode (83 minutes at 20 fps): its vectors are drawn whole in memory."""
_TASKS, _LENGTHS, _EPISODE, _STATE, _ACTION, _VIDEO = range(6)  # seed streams


@dataclass(frozen=True)
class MakeSpec:
    episodes: int
    views: int = 2
    size: int = 256
    """Frame height in pixels (and width, unless ``width``)."""
    seed: int = 0
    frames: int | None = None
    """Frames of every episode; ``None`` draws 60 to 150 per episode."""
    fps: int = 20
    embodiment: str = "panda"
    embodiment_id: int | None = None
    format: str = "v2.1"
    """Codebase version of the layout: ``v2.1`` (a file per episode) or ``v3.0`` (many per file)."""
    codec: str = "h264"
    width: int | None = None
    extras: bool = True
    """Write GR00T's modality.json and autotune's tokenizer.json and embodiment too."""
    file_mb: float | None = None
    """v3.0: start a new data or video file once one reaches this size (lerobot: 100 / 200 MB)."""

    def __post_init__(self) -> None:
        def bad(what: str, allowed: str) -> DataError:
            return DataError(f"data make: {what} is not allowed; allowed: {allowed}")

        if not 1 <= self.episodes <= MAX_EPISODES:
            raise bad(f"--episodes {self.episodes}", f"1 to {MAX_EPISODES}")
        if not 1 <= self.views <= len(VIEW_NAMES):
            raise bad(f"--views {self.views}", f"1 to {len(VIEW_NAMES)}")
        for flag, value in (("--size", self.size), ("--width", self.width)):
            if value is not None and (not 16 <= value <= 1024 or value % 2):
                raise bad(f"{flag} {value}", "an even number of pixels in [16, 1024]")
        if self.frames is not None and not 2 <= self.frames <= MAX_FRAMES:
            raise bad(f"--frames {self.frames}", f"2 to {MAX_FRAMES}")
        if not 1 <= self.fps <= 240:
            raise bad(f"--fps {self.fps}", "1 to 240")
        if self.embodiment not in EMBODIMENTS:
            raise bad(f"--embodiment {self.embodiment!r}", str(list(EMBODIMENTS)))
        if self.embodiment_id is not None and not 0 <= self.embodiment_id < PROJECTOR_SLOTS:
            raise bad(
                f"--embodiment-id {self.embodiment_id}",
                f"0 to {PROJECTOR_SLOTS - 1} (a projector slot of GR00T N1.6 and N1.7)",
            )
        if self.format not in FORMATS:
            raise bad(f"--format {self.format!r}", str(list(FORMATS)))
        if self.codec not in CODECS:
            raise bad(f"--codec {self.codec!r}", str(list(CODECS)))
        if self.file_mb is not None and not self.file_mb > 0:
            raise bad(f"--file-mb {self.file_mb}", "a size in MB > 0")
        # v2.1 writes a file per episode: a size at which to start the next file means nothing there
        if self.file_mb is not None and self.format != "v3.0":
            raise bad(f"--file-mb with --format {self.format}", "--file-mb with --format v3.0 only")

    @property
    def body(self) -> Embodiment:
        return EMBODIMENTS[self.embodiment]

    @property
    def shape(self) -> tuple[int, int]:
        """(height, width) of the frames."""
        return self.size, self.width or self.size

    @property
    def view_keys(self) -> list[str]:
        return [f"observation.images.{v}" for v in VIEW_NAMES[: self.views]]


@dataclass(frozen=True)
class EpisodeContent:
    """One made episode: its vectors, and its frames drawn on demand per view."""

    index: int
    start: int
    """Dataset-wide index of its first frame."""
    task_index: int
    state: np.ndarray
    action: np.ndarray
    spec: MakeSpec

    @property
    def length(self) -> int:
        return len(self.state)

    def frames(self, view: int) -> Iterator[np.ndarray]:
        renderer = FrameRenderer(
            self.spec.shape, self.length, rng_for(self.spec.seed, _VIDEO, self.index, view)
        )
        return (renderer.frame(i) for i in range(self.length))


def make_dataset(root: str | Path, spec: MakeSpec, *, force: bool = False) -> Path:
    """Write the dataset of ``spec`` at ``root`` (refused if it exists, unless ``force``).

    ``force`` replaces a dataset (a folder with ``meta/info.json``), never another folder: not one
    of the user's files is deleted by a mistyped path. The old dataset is moved aside and removed
    only once the new one is in its place, so a failure at any point leaves one of them whole."""
    root = Path(os.path.abspath(root))  # "." and "x/.." name their folder, not an empty name
    if root.exists() and not root.is_dir():
        raise DataError(f"{root}: exists and is not a folder")
    if root.exists() and any(root.iterdir()):
        _check_replaceable(root, force)
    root.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp, old = (root.parent / f".{root.name}.{kind}-{tag}" for kind in ("tmp", "old"))
    try:
        write_dataset(tmp, spec)
        if root.exists() or root.is_symlink():
            os.rename(root, old)
        try:
            os.rename(tmp, root)
        except BaseException:
            if old.exists() or old.is_symlink():
                os.rename(old, root)
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if old.is_symlink():  # --force on a link replaces the link, never the folder it points to
        old.unlink()
    else:
        shutil.rmtree(old, ignore_errors=True)
    return root


def _check_replaceable(root: Path, force: bool) -> None:
    if not force:
        raise DataError(f"{root}: exists and is not empty; pass --force to replace it")
    if not (root / INFO).is_file():
        raise DataError(
            f"{root}: holds files and no {INFO}, so it is not a dataset; --force replaces a "
            "dataset folder, never another folder (give a new or empty folder)"
        )
    cwd, real = Path.cwd().resolve(), root.resolve()
    if cwd == real or real in cwd.parents:
        raise DataError(
            f"{root}: is the current folder (or holds it); run `data make --force` from another folder"
        )


def write_dataset(root: Path, spec: MakeSpec) -> None:
    n_tasks = max(1, min(10, math.ceil(spec.episodes / 2)))
    tasks = make_tasks(n_tasks, rng_for(spec.seed, _TASKS))
    writer = writer_for(root, spec, tasks)
    lengths = episode_lengths(spec)
    try:
        for episode in episodes(spec, n_tasks, lengths):
            writer.add(episode)
            if episode.index == 0:
                _check_room(root, episode.length, sum(lengths), writer.unwritten())
        writer.finish()
    except BaseException:
        writer.abort()
        raise


def _check_room(root: Path, written: int, total: int, unwritten: int) -> None:
    """Refuse a dataset that will not fit on its disk, from the bytes its first ``written``
    frames took (``unwritten`` of them not on disk yet), before it fills the disk (and everything
    else writing there) for nothing."""
    used = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) + unwritten
    need = used / written * total
    free = shutil.disk_usage(root).free
    if need - used > free:
        raise DataError(
            f"{root.parent}: the dataset needs about {size_text(need)} (its first episode took "
            f"{size_text(used)}), and {size_text(free)} are free there; make fewer or shorter episodes, or "
            "give a folder on a larger disk"
        )


def episode_lengths(spec: MakeSpec) -> list[int]:
    """Frames of each episode: ``spec.frames``, or 60 to 150 drawn from the seed."""
    if spec.frames is None:
        return rng_for(spec.seed, _LENGTHS).integers(60, 151, spec.episodes).tolist()
    return [spec.frames] * spec.episodes


def episodes(spec: MakeSpec, n_tasks: int, lengths: list[int]) -> Iterator[EpisodeContent]:
    start = 0
    for ep, length in enumerate(lengths):
        state = trajectory(spec.body.state, length, rng_for(spec.seed, _STATE, ep))
        action = trajectory(spec.body.action, length, rng_for(spec.seed, _ACTION, ep))
        yield EpisodeContent(ep, start, (ep * 7 + spec.seed) % n_tasks, state, action, spec)
        start += length
