"""Codebase v2.0 and v2.1 (lerobot <= 0.3): one parquet file and one mp4 per view for each episode.

::

    meta/episodes.jsonl        {"episode_index", "tasks", "length"} per episode
    meta/tasks.jsonl           {"task_index", "task"}
    meta/stats.json            v2.0: stats of every feature
    meta/episodes_stats.jsonl  v2.1: {"episode_index", "stats": {feature: {min, max, mean, std, count}}}
    data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet           (info.json data_path)
    videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4  (info.json video_path)
"""

from __future__ import annotations

from pathlib import Path

from autotune.data import stats as st
from autotune.data.files import get, present, read_json, read_jsonl
from autotune.data.layout import INFO, STATS, Episode, Index, VideoSpan, inside, path_template
from autotune.errors import DataError

EPISODES, TASKS, EPISODES_STATS = (
    "meta/episodes.jsonl",
    "meta/tasks.jsonl",
    "meta/episodes_stats.jsonl",
)
PLACEHOLDERS = ("episode_chunk", "episode_index", "video_key")
DATA_PLACEHOLDERS = PLACEHOLDERS[:2]
"""A data file is an episode's, never a view's: data_path has no ``{video_key}``."""


def load_index(root: Path, info: dict, video_keys: list[str], fps: float) -> Index:
    info_path = root / INFO
    chunks = get(info, "chunks_size", info_path, int)
    if chunks < 1:
        raise DataError(
            f"{info_path}: chunks_size is {chunks}; allowed: an integer >= 1 (episodes per chunk)"
        )
    data = path_template(info, "data_path", DATA_PLACEHOLDERS, info_path)
    video = path_template(info, "video_path", PLACEHOLDERS, info_path)
    episodes = []
    path = root / EPISODES
    for n, row in enumerate(read_jsonl(path)):
        index, length = get(row, "episode_index", path, int), get(row, "length", path, int)
        if index != n or length < 1:
            raise DataError(
                f"{path}: line {n + 1}: episode {index} of length {length}; expected episode {n}, length >= 1"
            )
        at = {"episode_chunk": index // chunks, "episode_index": index}
        videos = {
            key: VideoSpan(
                inside(root, video.format(video_key=key, **at), "video_path", info_path), 0
            )
            for key in video_keys
        }
        data_file = inside(root, data.format(**at), "data_path", info_path)
        episodes.append(Episode(index, length, _task_names(row, path, n), data_file, 0, videos))
    if not episodes:
        raise DataError(f"{path}: lists no episodes")
    return Index(episodes, _tasks(root / TASKS), (path,))


def _task_names(row: dict, path: Path, n: int) -> tuple[str, ...]:
    tasks = get(row, "tasks", path, list)
    if not all(isinstance(t, str) for t in tasks):
        raise DataError(
            f"{path}: line {n + 1}: tasks is {tasks!r}; allowed: a list of task strings"
        )
    return tuple(tasks)


def _tasks(path: Path) -> dict[int, str]:
    tasks = {
        get(row, "task_index", path, int): get(row, "task", path, str) for row in read_jsonl(path)
    }
    if not tasks:
        raise DataError(f"{path}: lists no tasks")
    return tasks


def load_stats(root: Path, version: str, dims: dict[str, int]) -> st.Stats:
    """v2.1: the episodes' stats aggregated (stats.json where it has none); v2.0: stats.json."""
    per_episode = root / EPISODES_STATS
    if version == "v2.0" or (not present(per_episode) and present(root / STATS)):
        return st.from_stats_json(read_json(root / STATS), dims, root / STATS)
    rows = read_jsonl(per_episode)
    if not rows:
        raise DataError(f"{per_episode}: lists no episodes")
    parts = [
        (get(row, "stats", per_episode, dict), f"{per_episode}: line {n}")
        for n, row in enumerate(rows, 1)
    ]
    return st.from_episodes(parts, dims)
