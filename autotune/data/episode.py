"""One episode's parquet file, read and checked, and the per-key normalisation of its vectors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from autotune.data.meta import ACTION, COLUMNS, STATE, DatasetMeta, KeySlice
from autotune.errors import DataError


@dataclass(frozen=True)
class EpisodeData:
    state: np.ndarray  # [n, state_dim] float32
    action: np.ndarray  # [n, action_dim] float32
    task_index: np.ndarray  # [n] int64

    def __len__(self) -> int:
        return len(self.state)


def read_episode(meta: DatasetMeta, episode: int) -> EpisodeData:
    """The rows of ``episode``; a missing column or a length that disagrees with meta/ raises."""
    path = meta.parquet_path(episode)
    if not path.is_file():
        raise DataError(f"{path}: missing")
    try:
        names = pq.read_schema(path).names
        missing = [c for c in COLUMNS if c not in names]
        if missing:
            raise DataError(f"{path}: missing column {missing[0]!r} (columns: {names})")
        table = pq.read_table(path, columns=list(COLUMNS))
    except DataError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: not a readable parquet file ({exc})") from None
    n, expected = table.num_rows, meta.episodes[episode].length
    if n != expected:
        raise DataError(
            f"{path}: has {n} rows but meta/episodes.jsonl gives episode {episode} length {expected}"
        )
    if not np.array_equal(_ints(table, "frame_index", path), np.arange(n)):
        raise DataError(f"{path}: frame_index is not 0, 1, ..., {n - 1}")
    if (_ints(table, "episode_index", path) != episode).any():
        raise DataError(f"{path}: episode_index is not {episode} on every row")
    task_index = _ints(table, "task_index", path)
    unknown = sorted(set(task_index.tolist()) - set(meta.tasks))
    if unknown:
        raise DataError(f"{path}: task_index {unknown[0]} is not in meta/tasks.jsonl")
    return EpisodeData(
        state=_vectors(table, STATE, meta.state_dim, path),
        action=_vectors(table, ACTION, meta.action_dim, path),
        task_index=task_index,
    )


def _ints(table: pa.Table, column: str, path) -> np.ndarray:
    col = table.column(column)
    if col.null_count or not pa.types.is_integer(col.type):
        raise DataError(
            f"{path}: column {column!r} has type {col.type} or nulls; expected integers"
        )
    return col.to_numpy().astype(np.int64)


def _vectors(table: pa.Table, column: str, dim: int, path) -> np.ndarray:
    col = table.column(column).combine_chunks()
    kind = col.type
    if not (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    ):
        raise DataError(
            f"{path}: column {column!r} has type {kind}; expected a list of floats per row"
        )
    lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
    if col.null_count or (lengths != dim).any():
        raise DataError(
            f"{path}: column {column!r} has rows of length != {dim} (meta/info.json's shape)"
        )
    values = col.flatten().to_numpy(zero_copy_only=False).astype(np.float32)
    return values.reshape(len(col), dim)


class Normalizer:
    """Per sub-key normalisation: ``min_max`` to [-1, 1] (clipped) or ``mean_std`` (z-score)."""

    def __init__(self, keys: list[KeySlice], stats: dict[str, np.ndarray]) -> None:
        dim = keys[-1].end
        self.scale, self.offset = np.ones(dim, np.float64), np.zeros(dim, np.float64)
        self.clip = np.zeros(dim, bool)
        for key in keys:
            sl = slice(key.start, key.end)
            if key.normalization == "min_max":
                lo, hi = stats["min"][sl].astype(np.float64), stats["max"][sl].astype(np.float64)
                span = hi - lo
                scale = np.where(
                    span > 1e-8, 2.0 / np.maximum(span, 1e-8), 0.0
                )  # a constant dim maps to 0
                self.scale[sl], self.offset[sl], self.clip[sl] = scale, -1.0 - lo * scale, True
            else:
                scale = 1.0 / np.maximum(stats["std"][sl].astype(np.float64), 1e-6)
                self.scale[sl], self.offset[sl] = scale, -stats["mean"][sl] * scale

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = x * self.scale + self.offset
        y[..., self.clip] = np.clip(y[..., self.clip], -1.0, 1.0)
        return y.astype(np.float32)
