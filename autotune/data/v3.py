"""Codebase v3.0 (lerobot >= 0.4): many episodes per data and video file, indexed in parquet.

::

    meta/episodes/chunk-000/file-000.parquet  one row per episode: episode_index, tasks, length,
        data/chunk_index, data/file_index, dataset_from_index, dataset_to_index, and per video key
        videos/<key>/chunk_index, videos/<key>/file_index, videos/<key>/from_timestamp,
        videos/<key>/to_timestamp; stats/<feature>/<mean|std|min|max|count>
    meta/tasks.parquet                        task_index, the task strings as the (pandas) index
    meta/stats.json                           stats of every feature
    data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet          (info.json data_path)
    videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4 (info.json video_path)

An episode is rows ``[dataset_from_index, dataset_to_index)`` of the dataset, stored in order, so
its rows in its data file start where the file's first episode starts; its frames in a video
file start at ``from_timestamp``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from autotune.data import stats as st
from autotune.data.files import present, read_json, read_parquet
from autotune.data.layout import INFO, STATS, Episode, Index, VideoSpan, inside, path_template
from autotune.errors import DataError, short_repr

EPISODES_DIR, TASKS = "meta/episodes", "meta/tasks.parquet"
EPISODES_GLOB = "chunk-*/file-*.parquet"
PLACEHOLDERS = ("chunk_index", "file_index", "video_key")
DATA_PLACEHOLDERS = PLACEHOLDERS[:2]
"""A data file holds every view's rows: data_path has no ``{video_key}``."""
_COLUMNS = ("episode_index", "tasks", "length", "data/chunk_index", "data/file_index",
            "dataset_from_index", "dataset_to_index")  # fmt: skip
_VIDEO_COLUMNS = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")


def index_files(root: Path) -> list[Path]:
    files = sorted((root / EPISODES_DIR).glob(EPISODES_GLOB))
    if not files:
        raise DataError(f"{root / EPISODES_DIR}: no {EPISODES_GLOB} (the v3.0 episode index)")
    return files


def load_index(root: Path, info: dict, video_keys: list[str], fps: float) -> Index:
    info_path = root / INFO
    data = path_template(info, "data_path", DATA_PLACEHOLDERS, info_path)
    video = path_template(info, "video_path", PLACEHOLDERS, info_path)
    columns = list(_COLUMNS) + [f"videos/{k}/{c}" for k in video_keys for c in _VIDEO_COLUMNS]
    episodes: list[Episode] = []
    sources: list[Path] = []
    file_start: dict[Path, int] = {}
    previous_end = 0
    files = index_files(root)
    for path in files:
        for row in read_parquet(path, columns).to_pylist():
            ep = _episode(row, len(episodes), path, root, data, video, video_keys, fps)
            # Rows of a file are its episodes in order: an episode starts where the file's first one
            # started plus the rows before it.
            start = file_start.setdefault(ep.data_file, row["dataset_from_index"])
            ep = replace(ep, first_row=row["dataset_from_index"] - start)
            if episodes and row["dataset_from_index"] != previous_end:
                raise DataError(
                    f"{path}: episode {ep.index}: dataset_from_index {row['dataset_from_index']} "
                    f"does not follow episode {ep.index - 1}'s dataset_to_index {previous_end}"
                )
            previous_end = row["dataset_to_index"]
            episodes.append(ep)
            sources.append(path)
    if not episodes:
        raise DataError(f"{files[0]}: lists no episodes")
    _check_own_frames(episodes, sources)
    return Index(episodes, load_tasks(root / TASKS), tuple(files))


def _episode(
    row: dict, n: int, path: Path, root: Path, data: str, video: str, keys: list[str], fps: float
) -> Episode:
    where = f"{path}: episode {row.get('episode_index')}"
    ints = {c: row[c] for c in _COLUMNS if c != "tasks"}
    if any(not isinstance(v, int) for v in ints.values()):
        bad = next(c for c, v in ints.items() if not isinstance(v, int))
        raise DataError(f"{where}: {bad} is {short_repr(ints[bad])}, not an integer")
    index, length = row["episode_index"], row["length"]
    if index != n or length < 1 or row["dataset_to_index"] - row["dataset_from_index"] != length:
        raise DataError(
            f"{where}: expected episode {n} with length >= 1 = dataset_to_index - dataset_from_index "
            f"(got length {length}, rows [{row['dataset_from_index']}, {row['dataset_to_index']}))"
        )
    if not isinstance(row["tasks"], list) or not all(isinstance(t, str) for t in row["tasks"]):
        raise DataError(f"{where}: tasks is {short_repr(row['tasks'])}, not a list of strings")
    data_file = inside(
        root,
        data.format(chunk_index=row["data/chunk_index"], file_index=row["data/file_index"]),
        "data_path",
        root / INFO,
    )
    videos = {key: _span(row, key, where, root, video, fps, length) for key in keys}
    return Episode(index, length, tuple(row["tasks"]), data_file, 0, videos)


def _span(
    row: dict, key: str, where: str, root: Path, video: str, fps: float, length: int
) -> VideoSpan:
    col = f"videos/{key}/"
    chunk, file = row[col + "chunk_index"], row[col + "file_index"]
    start, stop = row[col + "from_timestamp"], row[col + "to_timestamp"]
    numbers = all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        for v in (start, stop)
    )
    if not all(isinstance(v, int) for v in (chunk, file)) or not numbers:
        raise DataError(
            f"{where}: {col}* are not integer chunk/file indices and finite float timestamps"
        )
    first = round(start * fps)
    if start < 0 or abs(start * fps - first) > 0.01 or stop * fps < first + length - 0.5:
        raise DataError(
            f"{where}: {col}from_timestamp {start} / to_timestamp {stop} do not hold {length} frames at {fps:g} fps"
        )
    relative = video.format(video_key=key, chunk_index=chunk, file_index=file)
    return VideoSpan(inside(root, relative, "video_path", root / INFO), first)


def _check_own_frames(episodes: list[Episode], sources: list[Path]) -> None:
    """No two episodes share a frame of a video file (``sources``: each one's index file). A span
    the index gets wrong would otherwise give an episode another's frames, which no frame count
    or decoder notices."""
    spans = sorted({(span.path, span.first_frame, ep.length, ep.index)
                    for ep in episodes for span in ep.videos.values()})  # fmt: skip
    for (path, first, length, owner), (other, start, n, index) in zip(spans, spans[1:]):
        if other == path and start < first + length:  # sorted: an overlap is with the span before
            raise DataError(
                f"{sources[index]}: episode {index}: its frames [{start}, {start + n}) of {path} are "
                f"episode {owner}'s too; allowed: episodes whose frames of a video file do not overlap"
            )


def load_tasks(path: Path) -> dict[int, str]:
    """task_index -> task; the task strings are a ``task`` column or the pandas index lerobot writes."""
    table = read_parquet(path)
    names = table.column_names
    index_cols = (table.schema.pandas_metadata or {}).get("index_columns", [])
    candidates = ["task"] + [c for c in index_cols if isinstance(c, str)]
    text = next(
        (c for c in candidates if c in names and _is_text(table.schema.field(c).type)), None
    )
    if "task_index" not in names or text is None:
        raise DataError(
            f"{path}: needs a 'task_index' column and the tasks as a 'task' column or the index (columns: {names})"
        )
    tasks = dict(
        zip(table.column("task_index").to_pylist(), table.column(text).to_pylist(), strict=True)
    )
    if not tasks or not all(isinstance(i, int) and isinstance(t, str) for i, t in tasks.items()):
        raise DataError(f"{path}: lists no tasks, or a task_index that is not an integer")
    return tasks


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def load_stats(root: Path, files: tuple[Path, ...], dims: dict[str, int]) -> st.Stats:
    """stats.json; without it, the episodes' ``stats/`` columns aggregated."""
    if present(root / STATS):
        return st.from_stats_json(read_json(root / STATS), dims, root / STATS)
    columns = [f"stats/{key}/{name}" for key in dims for name in (*st.STAT_NAMES, "count")]
    parts = []
    for path in files:
        try:
            table = read_parquet(path, columns)
        except DataError as exc:
            raise DataError(f"{exc} (no {root / STATS} either)") from None
        for n, row in enumerate(table.to_pylist()):
            raw = {
                key: {name: _flat(row[f"stats/{key}/{name}"]) for name in (*st.STAT_NAMES, "count")}
                for key in dims
            }
            parts.append((raw, f"{path}: row {n}"))
    return st.from_episodes(parts, dims)


def _flat(value):
    return None if value is None else np.asarray(value, dtype=np.float64).reshape(-1)
