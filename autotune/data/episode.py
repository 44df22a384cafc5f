"""One episode's rows of its parquet file, read and checked, and the per-key normalisation of its vectors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from autotune.data.files import parquet_file, read_rows, require_columns
from autotune.data.meta import FRAME_COLUMNS, DatasetMeta, KeySlice
from autotune.errors import DataError


@dataclass(frozen=True)
class EpisodeData:
    state: np.ndarray  # [n, state_dim] float32: the state sub-keys concatenated
    action: np.ndarray  # [n, action_dim] float32
    task_index: np.ndarray  # [n] int64: the instruction column

    def __len__(self) -> int:
        return len(self.state)


def columns_of(meta: DatasetMeta) -> list[str]:
    """The columns an episode is read from: vectors, instruction, frame and episode indices."""
    sources = [k.source for k in (*meta.state_keys, *meta.action_keys)]
    return list(dict.fromkeys([*sources, meta.modality.instruction, *FRAME_COLUMNS]))


def read_episode(meta: DatasetMeta, episode: int) -> EpisodeData:
    """The rows of ``episode``; a missing column or rows that disagree with meta/ raise."""
    ep = meta.episodes[episode]
    path = ep.data_file
    file = parquet_file(path)
    columns = columns_of(meta)
    require_columns(file, columns, path)
    rows = file.metadata.num_rows
    if ep.first_row == 0 and meta.version != "v3.0" and rows != ep.length:
        raise DataError(
            f"{path}: has {rows} rows but meta/episodes.jsonl gives episode {episode} length {ep.length}"
        )
    table = read_rows(file, path, columns, ep.first_row, ep.first_row + ep.length)
    where = f"{path}: rows [{ep.first_row}, {ep.first_row + ep.length}) of episode {episode}"
    if not np.array_equal(_ints(table, "frame_index", path), np.arange(ep.length)):
        raise DataError(f"{where}: frame_index is not 0, 1, ..., {ep.length - 1}")
    if (_ints(table, "episode_index", path) != episode).any():
        raise DataError(f"{where}: episode_index is not {episode} on every row")
    task_index = _ints(table, meta.modality.instruction, path)
    unknown = sorted(set(task_index.tolist()) - set(meta.tasks))
    if unknown:
        raise DataError(
            f"{path}: {meta.modality.instruction} {unknown[0]} is not a task of the dataset"
        )
    vectors = {
        c: _vectors(table, c, path, meta.declared_width(c))
        for c in dict.fromkeys(k.source for k in (*meta.state_keys, *meta.action_keys))
    }
    return EpisodeData(
        state=_concat(vectors, meta.state_keys),
        action=_concat(vectors, meta.action_keys),
        task_index=task_index,
    )


def _concat(vectors: dict[str, np.ndarray], keys: tuple[KeySlice, ...]) -> np.ndarray:
    return np.concatenate([vectors[k.source][:, k.start : k.end] for k in keys], axis=1)


def _ints(table: pa.Table, column: str, path) -> np.ndarray:
    col = table.column(column)
    if col.null_count or not pa.types.is_integer(col.type):
        raise DataError(
            f"{path}: column {column!r} has type {col.type} or nulls; expected integers"
        )
    return col.to_numpy().astype(np.int64)


def _vectors(table: pa.Table, column: str, path, declared: int) -> np.ndarray:
    """[rows, declared] float32 of a list column whose rows all have the ``declared`` length."""
    col = table.column(column).combine_chunks()
    kind = col.type
    if not (
        (
            pa.types.is_list(kind)
            or pa.types.is_large_list(kind)
            or pa.types.is_fixed_size_list(kind)
        )
        and _number(kind.value_type)
    ):
        raise DataError(
            f"{path}: column {column!r} has type {kind}; expected a list of floats per row"
        )
    lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
    if col.null_count or len(set(lengths.tolist())) > 1:
        raise DataError(f"{path}: column {column!r} has null rows or rows of different lengths")
    width = int(lengths[0]) if len(lengths) else declared
    if width != declared:
        # another layout than info.json's: sliced by its sub-keys, a long row would train on
        # values without a word, a short one be sliced short
        raise DataError(
            f"{path}: column {column!r} has {width} values per row; meta/info.json's "
            f"features.{column}.shape says {declared}"
        )
    values = col.flatten().to_numpy(zero_copy_only=False).astype(np.float32)
    values = values.reshape(len(col), declared)
    finite = np.isfinite(values)
    if not finite.all():  # a NaN state or action is a NaN loss at the first step that draws it
        row, i = np.argwhere(~finite)[0]
        raise DataError(
            f"{path}: column {column!r} holds {values[row, i]} at row {row} (value {i}); "
            "allowed: finite numbers"
        )
    return values


def _number(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)


class Normalizer:
    """Per sub-key normalisation of the concatenated vector: ``min_max`` to [-1, 1] (clipped) or
    ``mean_std`` (z-score), each with the stats of the sub-key's columns of its source feature."""

    def __init__(self, keys: tuple[KeySlice, ...], stats: dict[str, dict[str, np.ndarray]]) -> None:
        dim = sum(k.width for k in keys)
        self.scale, self.offset = np.ones(dim, np.float64), np.zeros(dim, np.float64)
        self.clip = np.zeros(dim, bool)
        at = 0
        for key in keys:
            out, src = slice(at, at + key.width), slice(key.start, key.end)
            s = {name: np.asarray(v, np.float64)[src] for name, v in stats[key.source].items()}
            if key.normalization == "min_max":
                varies = s["max"] - s["min"] > 1e-8
                scale = np.where(varies, 2.0 / np.maximum(s["max"] - s["min"], 1e-8), 0.0)
                # a constant dim maps to 0, as upstream's normalize_values_minmax
                self.scale[out], self.offset[out], self.clip[out] = (
                    scale,
                    np.where(varies, -1.0 - s["min"] * scale, 0.0),
                    True,
                )
            else:
                scale = 1.0 / np.maximum(s["std"], 1e-6)
                self.scale[out], self.offset[out] = scale, -s["mean"] * scale
            at += key.width

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = x * self.scale + self.offset
        y[..., self.clip] = np.clip(y[..., self.clip], -1.0, 1.0)
        return y.astype(np.float32)
