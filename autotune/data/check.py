"""``autotune data check DIR``: is a dataset whole and readable? First problem, or a summary.

    python -m autotune data check /tmp/ds

Checks every meta file (present, parseable, consistent), every episode's parquet (columns,
lengths, indices) and every video (opens, decodes to the end, frame size as declared, at least as
many frames as the episode). The first problem raises :class:`DataError` as ``DIR/path: problem``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune.data.episode import read_episode
from autotune.data.meta import TOKENIZER, DatasetMeta, load_meta
from autotune.data.text import WordVocabulary
from autotune.data.video import describe
from autotune.errors import DataError


@dataclass(frozen=True)
class DatasetSummary:
    root: str
    episodes: int
    frames: int
    tasks: int
    vocabulary: int
    fps: float
    views: list[str]
    video_shape: tuple[int, int, int]
    codec: str
    state_dim: int
    action_dim: int
    embodiment: str
    bytes: int


def check_dataset(root: str | Path) -> DatasetSummary:
    meta = load_meta(root)
    vocab = WordVocabulary.load(meta.root / TOKENIZER).vocab
    codecs = set()
    for ep in meta.episodes:
        read_episode(meta, ep.index)
        for key in meta.video_keys:
            codecs.add(
                check_video(meta.video_file(ep.index, key), ep.length, meta.video_shapes[key])
            )
    return _summary(meta, len(vocab), codecs)


def check_video(path: Path, min_frames: int, shape: tuple[int, ...]) -> str:
    """Decode every frame of ``path``; returns the codec name."""
    import av

    if not path.is_file():
        raise DataError(f"{path}: missing")
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
            raise DataError(
                f"{path}: {frames} frames decoded, fewer than the episode's {min_frames}"
            )
        return stream.codec_context.name


def _summary(meta: DatasetMeta, vocabulary: int, codecs: set[str]) -> DatasetSummary:
    shapes = set(meta.video_shapes.values())
    return DatasetSummary(
        root=str(meta.root), episodes=len(meta.episodes), frames=meta.total_frames, tasks=len(meta.tasks),
        vocabulary=vocabulary, fps=meta.fps, views=[k.rsplit(".", 1)[-1] for k in meta.video_keys],
        video_shape=next(iter(shapes)) if len(shapes) == 1 else (0, 0, 0), codec=",".join(sorted(codecs)),
        state_dim=meta.state_dim, action_dim=meta.action_dim,
        embodiment=f"{meta.embodiment_tag} (id {meta.embodiment_id})",
        bytes=sum(p.stat().st_size for p in meta.root.rglob("*") if p.is_file()),
    )  # fmt: skip


def render_summary(s: DatasetSummary) -> str:
    h, w, _ = s.video_shape
    return (
        f"OK {s.root}: {s.episodes} episodes, {s.frames} frames at {s.fps:g} fps, {s.tasks} tasks "
        f"({s.vocabulary} words); views {', '.join(s.views)} ({w}x{h} {s.codec}); "
        f"state {s.state_dim} / action {s.action_dim} dims; embodiment {s.embodiment}; "
        f"{s.bytes / 2**20:.1f} MiB"
    )
