"""The LeRobot v2 layout on disk: file names, and ``meta/`` loaded into one checked object.

::

    meta/info.json        fps, features and their shapes, path templates, totals
    meta/episodes.jsonl   {"episode_index", "tasks", "length"} per episode
    meta/tasks.jsonl      {"task_index", "task"}: the natural-language instructions
    meta/modality.json    GR00T's sub-keys of state and action ({"start", "end"}), video keys;
                          autotune adds "normalization" (min_max or mean_std) per sub-key
    meta/stats.json       mean / std / min / max (and q01 / q99) of observation.state and action
    meta/tokenizer.json   the word-level vocabulary of the tasks (autotune's, see text.py)
    data/chunk-000/episode_000000.parquet
    videos/chunk-000/observation.images.<view>/episode_000000.mp4

Every problem raises :class:`DataError` as ``path/of/file: problem``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autotune.errors import DataError

INFO, EPISODES, TASKS = "meta/info.json", "meta/episodes.jsonl", "meta/tasks.jsonl"
MODALITY, STATS, TOKENIZER = "meta/modality.json", "meta/stats.json", "meta/tokenizer.json"
META_FILES = (INFO, EPISODES, TASKS, MODALITY, STATS, TOKENIZER)
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
STATE, ACTION = "observation.state", "action"
COLUMNS = (STATE, ACTION, "timestamp", "frame_index", "episode_index", "index", "task_index")
NORMALIZATIONS = ("min_max", "mean_std")
STAT_NAMES = ("mean", "std", "min", "max")


@dataclass(frozen=True)
class KeySlice:
    """One sub-key of state or action: columns ``[start, end)`` and how they are normalised."""

    name: str
    start: int
    end: int
    normalization: str = "min_max"


@dataclass(frozen=True)
class Episode:
    index: int
    length: int
    tasks: tuple[str, ...]


@dataclass
class DatasetMeta:
    root: Path
    fps: float
    chunks_size: int
    data_path: str
    video_path: str
    episodes: list[Episode]
    tasks: dict[int, str]
    video_keys: list[str]
    video_shapes: dict[str, tuple[int, int, int]]
    state_keys: list[KeySlice]
    action_keys: list[KeySlice]
    stats: dict[str, dict[str, np.ndarray]]
    embodiment_tag: str = "new_embodiment"
    embodiment_id: int = 0
    info: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def state_dim(self) -> int:
        return self.state_keys[-1].end

    @property
    def action_dim(self) -> int:
        return self.action_keys[-1].end

    @property
    def total_frames(self) -> int:
        return sum(e.length for e in self.episodes)

    def parquet_path(self, episode: int) -> Path:
        return self.root / self.data_path.format(
            episode_chunk=episode // self.chunks_size, episode_index=episode
        )

    def video_file(self, episode: int, video_key: str) -> Path:
        chunk = episode // self.chunks_size
        return self.root / self.video_path.format(
            episode_chunk=chunk, video_key=video_key, episode_index=episode
        )


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: missing") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a readable JSON file ({exc})") from None


def read_jsonl(path: Path) -> list[dict]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise DataError(f"{path}: missing") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot be read ({exc})") from None
    rows = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise DataError(f"{path}: line {n} is not JSON ({exc})") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}: line {n} is not a JSON object")
            rows.append(row)
    return rows


def _get(obj: Any, key: str, path: Path, kind: type | tuple[type, ...], where: str = "") -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise DataError(f"{path}: missing key {where}{key!r}")
    if not isinstance(obj[key], kind) or isinstance(obj[key], bool):
        raise DataError(
            f"{path}: {where}{key!r} is {obj[key]!r}, not of type {getattr(kind, '__name__', kind)}"
        )
    return obj[key]


def load_meta(root: str | Path) -> DatasetMeta:
    """Read and cross-check every file of ``meta/``; the first problem raises :class:`DataError`."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: not a dataset folder (missing)")
    info_path = root / INFO
    info = read_json(info_path)
    fps = float(_get(info, "fps", info_path, (int, float)))
    if fps <= 0:
        raise DataError(f"{info_path}: fps is {fps}, not > 0")
    features = _get(info, "features", info_path, dict)
    dims = {k: _feature_dim(features, k, info_path) for k in (STATE, ACTION)}
    episodes = _load_episodes(root / EPISODES, info, info_path)
    tasks = _load_tasks(root / TASKS)
    for ep in episodes:
        missing = [t for t in ep.tasks if t not in tasks.values()]
        if missing:
            raise DataError(
                f"{root / EPISODES}: episode {ep.index} names task {missing[0]!r}, not in {TASKS}"
            )
    modality_path = root / MODALITY
    modality = read_json(modality_path)
    state_keys = _key_slices(modality, "state", dims[STATE], modality_path)
    action_keys = _key_slices(modality, "action", dims[ACTION], modality_path)
    video_keys = _video_keys(modality, features, modality_path)
    shapes = {
        k: tuple(_get(features[k], "shape", info_path, list, f"features.{k}.")) for k in video_keys
    }
    stats = _load_stats(root / STATS, dims)
    emb = info.get("embodiment", {})
    return DatasetMeta(
        root=root, fps=fps, chunks_size=int(_get(info, "chunks_size", info_path, int)),
        data_path=_get(info, "data_path", info_path, str), video_path=_get(info, "video_path", info_path, str),
        episodes=episodes, tasks=tasks, video_keys=video_keys, video_shapes=shapes,
        state_keys=state_keys, action_keys=action_keys, stats=stats,
        embodiment_tag=str(emb.get("tag", "new_embodiment")), embodiment_id=int(emb.get("id", 0)), info=info,
    )  # fmt: skip


def _feature_dim(features: dict, key: str, path: Path) -> int:
    feat = _get(features, key, path, dict, "features.")
    shape = _get(feat, "shape", path, list, f"features.{key}.")
    if len(shape) != 1 or not isinstance(shape[0], int) or shape[0] < 1:
        raise DataError(f"{path}: features.{key}.shape is {shape}, not [D] with D >= 1")
    return shape[0]


def _load_episodes(path: Path, info: dict, info_path: Path) -> list[Episode]:
    episodes = []
    for n, row in enumerate(read_jsonl(path)):
        index, length = _get(row, "episode_index", path, int), _get(row, "length", path, int)
        if index != n or length < 1:
            raise DataError(
                f"{path}: line {n + 1}: episode {index} of length {length}; expected episode {n}, length >= 1"
            )
        episodes.append(Episode(index, length, tuple(_get(row, "tasks", path, list))))
    if not episodes:
        raise DataError(f"{path}: lists no episodes")
    total = _get(info, "total_episodes", info_path, int)
    if total != len(episodes):
        raise DataError(
            f"{info_path}: total_episodes is {total} but {EPISODES} lists {len(episodes)}"
        )
    return episodes


def _load_tasks(path: Path) -> dict[int, str]:
    tasks = {}
    for row in read_jsonl(path):
        tasks[_get(row, "task_index", path, int)] = _get(row, "task", path, str)
    if not tasks:
        raise DataError(f"{path}: lists no tasks")
    return tasks


def _key_slices(modality: dict, part: str, dim: int, path: Path) -> list[KeySlice]:
    keys, end = [], 0
    for name, spec in _get(modality, part, path, dict).items():
        where = f"{part}.{name}."
        start, stop = _get(spec, "start", path, int, where), _get(spec, "end", path, int, where)
        norm = spec.get("normalization", "min_max")
        if start != end or stop <= start:
            raise DataError(
                f"{path}: {part}.{name} spans [{start}, {stop}); expected it to start at {end}"
            )
        if norm not in NORMALIZATIONS:
            raise DataError(
                f"{path}: {where}normalization {norm!r} is not one of {list(NORMALIZATIONS)}"
            )
        keys.append(KeySlice(name, start, stop, norm))
        end = stop
    if end != dim:
        raise DataError(
            f"{path}: the {part} keys cover {end} dimensions but info.json declares {dim}"
        )
    return keys


def _video_keys(modality: dict, features: dict, path: Path) -> list[str]:
    keys = [
        _get(v, "original_key", path, str, f"video.{k}.")
        for k, v in _get(modality, "video", path, dict).items()
    ]
    for key in keys:
        if features.get(key, {}).get("dtype") != "video":
            raise DataError(f"{path}: video key {key!r} is not a video feature of info.json")
    if not keys:
        raise DataError(f"{path}: declares no video keys")
    return keys


def _load_stats(path: Path, dims: dict[str, int]) -> dict[str, dict[str, np.ndarray]]:
    raw = read_json(path)
    stats = {}
    for key, dim in dims.items():
        entry = _get(raw, key, path, dict)
        stats[key] = {}
        for name in STAT_NAMES:
            values = np.asarray(_get(entry, name, path, list, f"{key}."), dtype=np.float32)
            if values.shape != (dim,) or not np.isfinite(values).all():
                raise DataError(
                    f"{path}: {key}.{name} has shape {list(values.shape)}; expected [{dim}] finite numbers"
                )
            stats[key][name] = values
    return stats
