"""The files of a made dataset, laid out as lerobot writes codebase v2.1 (lerobot 0.3) or v3.0
(lerobot 0.4): see v2.py and v3.py for the layouts. State and action are fixed-size lists of
float32 per row, as lerobot stores them. Per-episode statistics cover the vector and index
columns (not the images, which no reader here normalises)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from autotune.data import stats as st
from autotune.data import v2, v3
from autotune.data.encode import VideoWriter, encoder_for
from autotune.data.layout import INFO, MODALITY, STATS, TOKENIZER
from autotune.data.modality import ACTION, STATE
from autotune.data.text import WordVocabulary

if TYPE_CHECKING:  # make.py drives the writers
    from autotune.data.make import EpisodeContent, MakeSpec

CHUNKS_SIZE = 1000
V2_DATA = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V2_VIDEO = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
V3_DATA = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
V3_VIDEO = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
V3_EPISODES = "meta/episodes/chunk-000/file-000.parquet"
INDEX_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")
COLUMNS = (STATE, ACTION, *INDEX_COLUMNS)
"""Columns of a data file, in lerobot's order."""


def writer_for(root: Path, spec: MakeSpec, tasks: list[str]):
    return (V3Writer if spec.format == "v3.0" else V2Writer)(root, spec, tasks)


def episode_table(ep: EpisodeContent, fps: int) -> pa.Table:
    n = ep.length
    frame = np.arange(n, dtype=np.int64)

    def vectors(a: np.ndarray) -> pa.Array:
        return pa.FixedSizeListArray.from_arrays(pa.array(a.ravel().astype(np.float32)), a.shape[1])

    return pa.table({
        STATE: vectors(ep.state), ACTION: vectors(ep.action),
        "timestamp": pa.array((frame / fps).astype(np.float32)), "frame_index": pa.array(frame),
        "episode_index": pa.array(np.full(n, ep.index, np.int64)), "index": pa.array(ep.start + frame),
        "task_index": pa.array(np.full(n, ep.task_index, np.int64)),
    })  # fmt: skip


def episode_stats(table: pa.Table) -> dict[str, dict[str, list]]:
    """lerobot's per-episode stats of each column: min, max, mean, std, count."""
    out = {}
    for name in COLUMNS:
        col = table.column(name).combine_chunks()
        x = (
            col.flatten().to_numpy().reshape(len(col), -1)
            if name in (STATE, ACTION)
            else col.to_numpy()[:, None]
        )
        x = x.astype(np.float64)
        out[name] = {"min": x.min(0).tolist(), "max": x.max(0).tolist(), "mean": x.mean(0).tolist(),
                     "std": x.std(0).tolist(), "count": [len(x)]}  # fmt: skip
    return out


class BaseWriter:
    """What both layouts share: features, info.json, tasks, the extras."""

    version = ""

    def __init__(self, root: Path, spec: MakeSpec, tasks: list[str]) -> None:
        self.root, self.spec, self.tasks = root, spec, tasks
        self.encoder = encoder_for(spec.codec)
        self.frames = 0
        self.per_episode: list[dict] = []

    def features(self) -> dict:
        h, w = self.spec.shape
        video = {"video.height": h, "video.width": w, "video.codec": self.encoder.codec, "video.pix_fmt": "yuv420p",
                 "video.is_depth_map": False, "video.fps": self.spec.fps, "video.channels": 3, "has_audio": False}  # fmt: skip
        feats = {key: {"dtype": "video", "shape": [h, w, 3], "names": ["height", "width", "channels"], "info": video}
                 for key in self.spec.view_keys}  # fmt: skip
        body = self.spec.body
        for key, keys in ((STATE, body.state), (ACTION, body.action)):
            names = [f"{name}_{i}" for name, dims, _ in keys for i in range(dims)]
            feats[key] = {"dtype": "float32", "shape": [len(names)], "names": names}
        for col, dtype in zip(
            INDEX_COLUMNS, ("float32", "int64", "int64", "int64", "int64"), strict=True
        ):
            feats[col] = {"dtype": dtype, "shape": [1], "names": None}
        return feats

    def info(self, **layout) -> dict:
        s = self.spec
        info = {"codebase_version": self.version, "robot_type": s.body.robot_type, "total_episodes": s.episodes,
                "total_frames": self.frames, "total_tasks": len(self.tasks), **layout, "fps": s.fps,
                "splits": {"train": f"0:{s.episodes}"}, "features": self.features()}  # fmt: skip
        if s.extras:
            emb_id = s.body.default_id if s.embodiment_id is None else s.embodiment_id
            info["embodiment"] = {"tag": s.body.tag, "id": emb_id}
            info["autotune"] = {"made_by": "autotune data make", "seed": s.seed}
        return info

    def write_extras(self) -> None:
        if not self.spec.extras:
            return
        dump(self.root / MODALITY, modality_json(self.spec))
        WordVocabulary.build(self.tasks).save(self.root / TOKENIZER)

    def abort(self) -> None:
        """Close whatever the writer holds open, its errors ignored: the dataset is being thrown away
        (a full disk fails the closing too), and a writer left open reports that failure again, as a
        traceback, when it is collected."""

    def unwritten(self) -> int:
        """Bytes given to the files still open that are not on disk yet."""
        return 0

    def episode_row(self, ep: EpisodeContent) -> dict:
        return {
            "episode_index": ep.index,
            "tasks": [self.tasks[ep.task_index]],
            "length": ep.length,
        }


class V2Writer(BaseWriter):
    version = "v2.1"

    def add(self, ep: EpisodeContent) -> None:
        chunk = ep.index // CHUNKS_SIZE
        table = episode_table(ep, self.spec.fps)
        path = self.root / V2_DATA.format(episode_chunk=chunk, episode_index=ep.index)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        for v, key in enumerate(self.spec.view_keys):
            video = self.root / V2_VIDEO.format(
                episode_chunk=chunk, video_key=key, episode_index=ep.index
            )
            writer = VideoWriter(video, self.encoder, self.spec.fps, *self.spec.shape)
            try:
                writer.add_episode(ep.frames(v))
            finally:
                writer.close()
        self.per_episode.append((self.episode_row(ep), episode_stats(table)))
        self.frames += ep.length

    def finish(self) -> None:
        s = self.spec
        layout = {"total_videos": s.episodes * s.views, "total_chunks": (s.episodes - 1) // CHUNKS_SIZE + 1,
                  "chunks_size": CHUNKS_SIZE, "data_path": V2_DATA, "video_path": V2_VIDEO}  # fmt: skip
        dump(self.root / INFO, self.info(**layout))
        lines(self.root / v2.EPISODES, [row for row, _ in self.per_episode])
        lines(
            self.root / v2.TASKS, [{"task_index": i, "task": t} for i, t in enumerate(self.tasks)]
        )
        lines(self.root / v2.EPISODES_STATS,
              [{"episode_index": row["episode_index"], "stats": stats} for row, stats in self.per_episode])  # fmt: skip
        self.write_extras()


class V3Writer(BaseWriter):
    """Episodes appended to the current data file and one video file per view, each rolled over
    to the next file index once it reaches ``spec.file_mb`` (lerobot: 100 MB data, 200 MB video)."""

    version = "v3.0"

    def __init__(self, root: Path, spec: MakeSpec, tasks: list[str]) -> None:
        super().__init__(root, spec, tasks)
        self.data_mb, self.video_mb = spec.file_mb or 100, spec.file_mb or 200
        self.data: pq.ParquetWriter | None = None
        self.data_path, self.data_at = root, (0, 0)
        self.videos: dict[str, tuple[VideoWriter, int, int]] = {}

    def add(self, ep: EpisodeContent) -> None:
        table = episode_table(ep, self.spec.fps)
        row = {**self.episode_row(ep), **self._add_data(table), "dataset_from_index": ep.start,
               "dataset_to_index": ep.start + ep.length}  # fmt: skip
        row = {k: row[k] for k in ("episode_index", "tasks", "length", "data/chunk_index", "data/file_index",
                                   "dataset_from_index", "dataset_to_index")}  # fmt: skip
        for v, key in enumerate(self.spec.view_keys):
            row |= self._add_video(key, ep, v)
        for feature, values in episode_stats(table).items():
            row |= {f"stats/{feature}/{name}": value for name, value in values.items()}
        row |= {"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0}
        self.per_episode.append(row)
        self.frames += ep.length

    def _add_data(self, table: pa.Table) -> dict:
        if self.data is not None and size_mb(self.data_path) >= self.data_mb:
            self.data.close()
            self.data, self.data_at = None, next_file(*self.data_at)
        if self.data is None:
            chunk, file = self.data_at
            self.data_path = self.root / V3_DATA.format(chunk_index=chunk, file_index=file)
            self.data_path.parent.mkdir(parents=True, exist_ok=True)
            self.data = pq.ParquetWriter(self.data_path, table.schema)
        self.data.write_table(table)  # one row group per episode
        return {"data/chunk_index": self.data_at[0], "data/file_index": self.data_at[1]}

    def _add_video(self, key: str, ep: EpisodeContent, view: int) -> dict:
        writer, chunk, file = self.videos.get(key, (None, 0, 0))
        # the encoded bytes: an open mp4 holds most of them in its muxer, off the disk
        if (
            writer is not None
            and max(file_size(writer.path), writer.encoded) / 2**20 >= self.video_mb
        ):
            writer.close()
            writer, (chunk, file) = None, next_file(chunk, file)
        if writer is None:
            path = self.root / V3_VIDEO.format(video_key=key, chunk_index=chunk, file_index=file)
            writer = VideoWriter(path, self.encoder, self.spec.fps, *self.spec.shape)
        self.videos[key] = (writer, chunk, file)
        start = writer.frames / self.spec.fps
        writer.add_episode(ep.frames(view))
        col = f"videos/{key}/"
        return {col + "chunk_index": chunk, col + "file_index": file, col + "from_timestamp": start,
                col + "to_timestamp": writer.frames / self.spec.fps}  # fmt: skip

    def unwritten(self) -> int:
        # an open mp4 holds its first episode's packets in the muxer's buffers: not on disk yet
        return sum(max(0, w.encoded - file_size(w.path)) for w, _, _ in self.videos.values())

    def abort(self) -> None:
        open_files = [self.data] if self.data is not None else []
        for closeable in (*open_files, *(writer for writer, _, _ in self.videos.values())):
            with contextlib.suppress(Exception):
                closeable.close()
        self.data, self.videos = None, {}

    def finish(self) -> None:
        if self.data is not None:
            self.data.close()
        for writer, _, _ in self.videos.values():
            writer.close()
        path = self.root / V3_EPISODES
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(self.per_episode), path)
        tasks = pd.DataFrame({"task_index": range(len(self.tasks))}, index=pd.Index(self.tasks))
        tasks.to_parquet(self.root / v3.TASKS)
        dump(self.root / STATS, aggregated_stats(self.per_episode))
        layout = {"chunks_size": CHUNKS_SIZE, "data_files_size_in_mb": self.data_mb,
                  "video_files_size_in_mb": self.video_mb, "data_path": V3_DATA, "video_path": V3_VIDEO}  # fmt: skip
        dump(self.root / INFO, self.info(**layout))
        self.write_extras()


def file_size(path: Path) -> int:
    """Bytes written so far (an encoder may not have opened its file yet: 0)."""
    return path.stat().st_size if path.exists() else 0


def size_mb(path: Path) -> float:
    return file_size(path) / 2**20


def next_file(chunk: int, file: int) -> tuple[int, int]:
    """lerobot's numbering: file indices within a chunk of ``CHUNKS_SIZE`` files."""
    return (chunk + 1, 0) if file + 1 >= CHUNKS_SIZE else (chunk, file + 1)


def aggregated_stats(rows: list[dict]) -> dict:
    out = {}
    for name in COLUMNS:
        parts = [({k: np.asarray(r[f"stats/{name}/{k}"], np.float64) for k in st.STAT_NAMES},
                  float(r[f"stats/{name}/count"][0])) for r in rows]  # fmt: skip
        agg = st.aggregate(parts)
        out[name] = {k: v.tolist() for k, v in agg.items()} | {
            "count": [int(sum(c for _, c in parts))]
        }
    return out


def modality_json(spec: MakeSpec) -> dict:
    def slices(keys):
        out, start = {}, 0
        for name, dims, norm in keys:
            out[name] = {"start": start, "end": start + dims, "normalization": norm}
            start += dims
        return out

    return {
        "state": slices(spec.body.state), "action": slices(spec.body.action),
        "video": {key.rsplit(".", 1)[1]: {"original_key": key} for key in spec.view_keys},
        "annotation": {"human.task_description": {"original_key": "task_index"}},
    }  # fmt: skip


def dump(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2) + "\n")


def lines(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
