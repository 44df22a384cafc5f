"""A LeRobot dataset's ``meta/`` loaded into one checked object, whatever its codebase version.

``meta/info.json`` gives the version (``codebase_version``: v2.0, v2.1 or v3.0), fps, features
and path templates; the version's reader (v2.py, v3.py) finds the episodes, tasks and stats;
``meta/modality.json`` (GR00T's, modality.py) says which columns are state, action, views and
instruction, and is inferred from info.json where it is missing (a one-line notice in
``DatasetMeta.notices``). autotune's own additions, all optional: ``meta/tokenizer.json`` (the
word vocabulary, else built from the tasks) and info.json's ``embodiment`` ({"tag", "id"}).

Every problem raises :class:`DataError` as ``path/of/file: problem``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.data import v2, v3
from autotune.data.files import get, present, printable_names, read_json
from autotune.data.layout import INFO, MODALITY, STATS, TOKENIZER, Episode
from autotune.data.modality import (
    ACTION,
    STATE,
    KeySlice,
    Modality,
    describe_inferred,
    infer_modality,
    read_modality,
)
from autotune.data.stats import Stats
from autotune.errors import DataError, short_repr

VERSIONS = ("v2.0", "v2.1", "v3.0")
FRAME_COLUMNS = ("frame_index", "episode_index")
"""Columns every data file must have besides the state, action and instruction columns."""

__all__ = ["ACTION", "INFO", "MODALITY", "STATE", "STATS", "TOKENIZER", "VERSIONS", "DatasetMeta",
           "Episode", "KeySlice", "load_meta"]  # fmt: skip


@dataclass
class DatasetMeta:
    root: Path
    version: str
    fps: float
    episodes: list[Episode]
    tasks: dict[int, str]
    modality: Modality
    video_shapes: dict[str, tuple[int, int, int]]
    """Video key -> (height, width, channels) as info.json declares it."""
    stats: Stats
    """Source feature of a state/action sub-key -> mean/std/min/max arrays."""
    index_files: tuple[Path, ...] = ()
    embodiment_tag: str = "new_embodiment"
    embodiment_id: int | None = None
    """info.json's ``embodiment.id`` where autotune wrote one; else the workload decides."""
    notices: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def video_keys(self) -> list[str]:
        return self.modality.video_keys

    @property
    def state_keys(self) -> tuple[KeySlice, ...]:
        return self.modality.state

    @property
    def action_keys(self) -> tuple[KeySlice, ...]:
        return self.modality.action

    @property
    def state_dim(self) -> int:
        return self.modality.state_dim

    @property
    def action_dim(self) -> int:
        return self.modality.action_dim

    def declared_width(self, feature: str) -> int:
        """Values per row that info.json's ``features.<feature>.shape`` gives a state or action
        feature (checked to be ``[D]`` when the modality was read)."""
        return int(self.info["features"][feature]["shape"][0])

    @property
    def total_frames(self) -> int:
        return sum(e.length for e in self.episodes)

    def codecs(self) -> dict[str, str]:
        """Video key -> the codec info.json declares (``?`` where it says none)."""
        features = self.info.get("features", {})
        return {
            k: str(features.get(k, {}).get("info", {}).get("video.codec", "?"))
            for k in self.video_keys
        }


FPS_RANGE = (1e-3, 1e6)
"""Frames a second a recording may have: a frame in 17 minutes to a million a second. Past these the
timestamps' checks compare numbers of hundreds of digits and blame the parquet for the fps."""
FPS_TEXT = f"a number from {FPS_RANGE[0]:g} to {FPS_RANGE[1]:g}"


def load_meta(root: str | Path, *, modality_file: bool = True) -> DatasetMeta:
    """Read and cross-check ``meta/`` of any supported version; the first problem raises.
    ``modality_file=False``: the modality inferred from ``info.json``, ``modality.json`` unread
    (what ``data modality --write --force`` writes over it, however broken it is)."""
    root = Path(root)
    if not root.is_dir():
        what = (
            "a file"
            if root.exists()
            else "a link to nothing, or a loop of links"
            if root.is_symlink()
            else "missing"
        )
        raise DataError(f"{root}: not a dataset folder ({what}); give the folder lerobot wrote")
    info_path = root / INFO
    info = read_json(info_path)
    version = get(info, "codebase_version", info_path, str)
    if version not in VERSIONS:
        raise DataError(
            f"{info_path}: codebase_version {short_repr(version)} is not supported; "
            f"supported: {list(VERSIONS)}"
        )
    fps = _float(get(info, "fps", info_path, (int, float)))
    if not (math.isfinite(fps) and FPS_RANGE[0] <= fps <= FPS_RANGE[1]):  # 1e999 reads as inf
        raise DataError(f"{info_path}: fps is {fps:g}; allowed: {FPS_TEXT}")
    features = get(info, "features", info_path, dict)
    emb = info.get("embodiment") if isinstance(info.get("embodiment"), dict) else {}
    names = [*(("a key of features", k) for k in features), ("embodiment.tag", emb.get("tag"))]
    names += [(f"features.{k}.info.video.codec", _codec(f)) for k, f in features.items()]
    printable_names(names, info_path)
    modality, notices = _modality(root, features, modality_file)
    reader = v3 if version == "v3.0" else v2
    index = reader.load_index(root, info, modality.video_keys, fps)
    _check_counts(index.episodes, index.tasks, info, info_path, index.files[0])
    dims = {k.source: _dim(features, k.source) for k in (*modality.state, *modality.action)}
    stats = (
        v3.load_stats(root, index.files, dims)
        if version == "v3.0"
        else v2.load_stats(root, version, dims)
    )
    return DatasetMeta(
        root=root, version=version, fps=fps, episodes=index.episodes, tasks=index.tasks, modality=modality,
        video_shapes={k: _frame_shape(features, k, info_path) for k in modality.video_keys}, stats=stats,
        index_files=index.files, embodiment_tag=str(emb.get("tag", "new_embodiment")),
        embodiment_id=emb["id"] if isinstance(emb.get("id"), int) else None, notices=notices, info=info,
    )  # fmt: skip


def _codec(feature: object) -> object:
    info = feature.get("info") if isinstance(feature, dict) else None
    return info.get("video.codec") if isinstance(info, dict) else None


def _float(value: int | float) -> float:
    """``value`` as a float; an integer beyond a float's range (10**400) reads as inf, as 1e400 does."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _modality(root: Path, features: dict, read_file: bool) -> tuple[Modality, list[str]]:
    path = root / MODALITY
    if read_file and present(path):
        return read_modality(read_json(path), features, path), []
    modality = infer_modality(features, root / INFO)
    return modality, [describe_inferred(modality, path, root)]


def _dim(features: dict, key: str) -> int:
    return int(features[key]["shape"][0])


def _frame_shape(features: dict, key: str, path: Path) -> tuple[int, int, int]:
    """(height, width, channels) of a video feature, whichever order its ``names`` give."""
    feat = features[key]
    shape = get(feat, "shape", path, list, f"features.{key}.")
    names = feat.get("names")
    if len(shape) != 3 or not all(isinstance(s, int) and s > 0 for s in shape):
        raise DataError(f"{path}: features.{key}.shape is {shape}, not [height, width, channels]")
    if isinstance(names, list) and len(names) == 3 and names[0] in ("channel", "channels"):
        return shape[1], shape[2], shape[0]
    return shape[0], shape[1], shape[2]


def _check_counts(
    episodes: list[Episode], tasks: dict[int, str], info: dict, info_path: Path, index: Path
) -> None:
    total = get(info, "total_episodes", info_path, int)
    if total != len(episodes):
        raise DataError(
            f"{info_path}: total_episodes is {total} but the episode index ({index}) lists {len(episodes)}"
        )
    known = set(tasks.values())
    for ep in episodes:
        missing = [t for t in ep.tasks if t not in known]
        if missing:
            raise DataError(
                f"{index}: episode {ep.index} names task {missing[0]!r}, which is not among the tasks"
            )
