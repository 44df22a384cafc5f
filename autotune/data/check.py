"""``autotune data check DIR``: is a dataset whole and readable? First problem, or a summary.

    python -m autotune data check /tmp/ds

Checks every meta file (present, parseable, consistent), every data file (columns; each
episode's rows, frame and episode indices, timestamps on the fps clock; v3.0: the file holds
exactly its episodes' rows) and every video file (opens, decodes to the end, frame size as
declared, a frame for every frame of its episodes). The first problem raises :class:`DataError`
as ``DIR/path: problem``. The summary says what was found: codebase version, episodes, frames,
fps, views, codecs (and the decoder PyAV used), state/action dims, where the modality came from.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from autotune.data.content import PROJECTOR_SLOTS
from autotune.data.episode import read_episode
from autotune.data.files import parquet_file, read_rows, require_columns, require_file
from autotune.data.layout import INFO, TOKENIZER
from autotune.data.meta import DatasetMeta, load_meta
from autotune.data.text import WordVocabulary
from autotune.data.video import describe
from autotune.errors import DataError

TIMESTAMP_TOLERANCE_S = 1e-4
"""How far a frame's ``timestamp`` may be from ``frame_index / fps`` (lerobot's tolerance_s)."""


@dataclass(frozen=True)
class DatasetSummary:
    root: str
    version: str
    episodes: int
    frames: int
    tasks: int
    vocabulary: int
    fps: float
    views: list[str]
    video_shapes: list[tuple[int, int, int]]
    codecs: list[str]
    """Each view's codec as decoded, with the decoder: ``av1 (libdav1d)``."""
    state_dim: int
    action_dim: int
    modality: str
    """``meta/modality.json`` or ``inferred``."""
    embodiment: str
    data_files: int
    video_files: int
    bytes: int
    notices: list[str]


def check_dataset(root: str | Path) -> DatasetSummary:
    meta = load_meta(root)
    _check_embodiment(meta)
    vocab = WordVocabulary.for_dataset(meta.root / TOKENIZER, meta.tasks.values()).vocab
    by_file: dict[Path, list] = defaultdict(list)
    for ep in meta.episodes:
        by_file[ep.data_file].append(ep)
    for path, episodes in by_file.items():
        check_data_file(meta, path, episodes)
    codecs = {}
    for key in meta.video_keys:
        spans: dict[Path, int] = {}
        for ep in meta.episodes:
            span = ep.videos[key]
            spans[span.path] = max(spans.get(span.path, 0), span.first_frame + ep.length)
        found = {
            check_video(path, frames, meta.video_shapes[key]) for path, frames in spans.items()
        }
        codecs[key] = ", ".join(sorted(found))
    return _summary(meta, len(vocab), codecs, len(by_file))


def _check_embodiment(meta: DatasetMeta) -> None:
    """info.json's embodiment id names a projector slot: training refuses any other."""
    emb = meta.embodiment_id
    if emb is not None and not 0 <= emb < PROJECTOR_SLOTS:
        raise DataError(
            f"{meta.root / INFO}: embodiment.id {emb} is not a projector slot of GR00T N1.6 or "
            f"N1.7; allowed: 0 to {PROJECTOR_SLOTS - 1}"
        )


def check_data_file(meta: DatasetMeta, path: Path, episodes: list) -> None:
    """Every episode of ``path`` reads; the file has exactly their rows; timestamps fit the fps."""
    for ep in episodes:
        read_episode(meta, ep.index)
    file = parquet_file(path)
    require_columns(file, ["timestamp"], path)
    rows, expected = file.metadata.num_rows, sum(ep.length for ep in episodes)
    if rows != expected:
        raise DataError(
            f"{path}: has {rows} rows; its episodes {episodes[0].index}..{episodes[-1].index} have {expected}"
        )
    for ep in episodes:
        table = read_rows(
            file, path, ["timestamp", "frame_index"], ep.first_row, ep.first_row + ep.length
        )
        col = table.column("timestamp")
        if col.null_count or not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
            raise DataError(
                f"{path}: column 'timestamp' has type {col.type} or nulls; expected seconds (numbers)"
            )
        ts = col.to_numpy(zero_copy_only=False).astype(np.float64)
        off = np.abs(ts - table.column("frame_index").to_numpy() / meta.fps)
        scale = np.abs(ts[np.isfinite(ts)]).max(initial=0.0)
        late = ~(off <= TIMESTAMP_TOLERANCE_S + 1e-7 * scale)  # a NaN timestamp is never on time
        if late.any():
            n = int(late.argmax())
            raise DataError(
                f"{path}: episode {ep.index} frame {n} has timestamp {ts[n]:.6f}, not {n / meta.fps:.6f} at {meta.fps:g} fps"
            )


def check_video(path: Path, min_frames: int, shape: tuple[int, ...]) -> str:
    """Decode every frame of ``path``; returns ``codec (decoder)``."""
    import av

    require_file(path)
    try:
        container = av.open(str(path))
    except Exception as exc:
        raise DataError(f"{path}: cannot open the video ({describe(exc, path)})") from None
    with container:
        if not container.streams.video:
            raise DataError(f"{path}: no video stream")
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        frames = 0
        try:
            for frame in container.decode(stream):
                if (frame.height, frame.width) != tuple(shape[:2]):
                    raise DataError(
                        f"{path}: frame {frames} is {frame.height}x{frame.width}, info.json says {shape[0]}x{shape[1]}"
                    )
                frames += 1
        except DataError:
            raise
        except Exception as exc:
            raise DataError(
                f"{path}: cannot decode frame {frames} ({describe(exc, path)})"
            ) from None
        if frames < min_frames:
            raise DataError(f"{path}: {frames} frames decoded; its episodes need {min_frames}")
        codec = stream.codec_context.codec
        return (
            codec.canonical_name
            if codec.canonical_name == codec.name
            else f"{codec.canonical_name} ({codec.name})"
        )


def _summary(
    meta: DatasetMeta, vocabulary: int, codecs: dict[str, str], data_files: int
) -> DatasetSummary:
    emb = f"{meta.embodiment_tag}" + (
        f" (id {meta.embodiment_id})" if meta.embodiment_id is not None else ""
    )
    return DatasetSummary(
        root=str(meta.root), version=meta.version, episodes=len(meta.episodes), frames=meta.total_frames,
        tasks=len(meta.tasks), vocabulary=vocabulary, fps=meta.fps, views=[v.name for v in meta.modality.views],
        video_shapes=[meta.video_shapes[k] for k in meta.video_keys], codecs=[codecs[k] for k in meta.video_keys],
        state_dim=meta.state_dim, action_dim=meta.action_dim,
        modality="inferred" if meta.modality.inferred else "meta/modality.json", embodiment=emb,
        data_files=data_files, video_files=len({ep.videos[k].path for ep in meta.episodes for k in meta.video_keys}),
        bytes=sum(p.stat().st_size for p in meta.root.rglob("*") if p.is_file()), notices=list(meta.notices),
    )  # fmt: skip


def render_summary(s: DatasetSummary) -> str:
    def view(i: int) -> str:
        h, w, _ = s.video_shapes[i]
        return f"{s.views[i]} {w}x{h} {s.codecs[i]}"

    views = "; ".join(view(i) for i in range(len(s.views)))
    return (
        f"OK {s.root}: LeRobot {s.version}, {s.episodes} episodes, {s.frames} frames at {s.fps:g} fps, "
        f"{s.tasks} tasks ({s.vocabulary} words); {len(s.views)} views: {views}; "
        f"state {s.state_dim} / action {s.action_dim} dims (modality: {s.modality}); embodiment {s.embodiment}; "
        f"{s.data_files} data files, {s.video_files} video files, {s.bytes / 2**20:.1f} MiB"
    )
