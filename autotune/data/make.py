"""``autotune data make``: write a synthetic dataset in the LeRobot v2 layout (see meta.py).

    python -m autotune data make /tmp/ds --episodes 8 --views 2 --size 256 --seed 0

The same arguments give the same parquet bytes and the same decoded frames. Videos are H.264
(libx264; MPEG-4 part 2 where the PyAV wheel lacks it) with a key frame every 30 frames and
B-frames, as camera recordings are; the dataset appears at once (written aside, then renamed).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from autotune.data import meta as m
from autotune.data.content import (
    EMBODIMENTS,
    VIEW_NAMES,
    Embodiment,
    FrameRenderer,
    make_tasks,
    rng_for,
    trajectory,
)
from autotune.data.text import WordVocabulary
from autotune.errors import DataError

CHUNKS_SIZE = 1000
GOP = 30
_TASKS, _LENGTHS, _EPISODE, _STATE, _ACTION, _VIDEO = range(6)  # seed streams


@dataclass(frozen=True)
class MakeSpec:
    episodes: int
    views: int = 2
    size: int = 256
    seed: int = 0
    frames: int | None = None
    """Frames of every episode; ``None`` draws 60 to 150 per episode."""
    fps: int = 20
    embodiment: str = "panda"
    embodiment_id: int | None = None

    def __post_init__(self) -> None:
        def bad(what: str, allowed: str) -> DataError:
            return DataError(f"data make: {what} is not allowed; allowed: {allowed}")

        if self.episodes < 1:
            raise bad(f"--episodes {self.episodes}", "an integer >= 1")
        if not 1 <= self.views <= len(VIEW_NAMES):
            raise bad(f"--views {self.views}", f"1 to {len(VIEW_NAMES)}")
        if not 16 <= self.size <= 1024 or self.size % 2:
            raise bad(f"--size {self.size}", "an even number of pixels in [16, 1024]")
        if self.frames is not None and self.frames < 2:
            raise bad(f"--frames {self.frames}", "an integer >= 2")
        if not 1 <= self.fps <= 240:
            raise bad(f"--fps {self.fps}", "1 to 240")
        if self.embodiment not in EMBODIMENTS:
            raise bad(f"--embodiment {self.embodiment!r}", str(list(EMBODIMENTS)))

    @property
    def body(self) -> Embodiment:
        return EMBODIMENTS[self.embodiment]


def make_dataset(root: str | Path, spec: MakeSpec, *, force: bool = False) -> Path:
    """Write the dataset of ``spec`` at ``root`` (refused if it exists, unless ``force``)."""
    root = Path(root)
    if root.exists() and any(root.iterdir()) and not force:
        raise DataError(f"{root}: exists and is not empty; pass --force to replace it")
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = root.parent / f".{root.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        write_dataset(tmp, spec)
        if root.exists():
            shutil.rmtree(root)
        os.rename(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def write_dataset(root: Path, spec: MakeSpec) -> None:
    body = spec.body
    n_tasks = max(1, min(10, math.ceil(spec.episodes / 2)))
    tasks = make_tasks(n_tasks, rng_for(spec.seed, _TASKS))
    if spec.frames is None:
        lengths = rng_for(spec.seed, _LENGTHS).integers(60, 151, spec.episodes).tolist()
    else:
        lengths = [spec.frames] * spec.episodes
    views = [f"observation.images.{v}" for v in VIEW_NAMES[: spec.views]]
    codec = video_codec()
    states, actions, episodes, start = [], [], [], 0
    for ep, length in enumerate(lengths):
        task_index = (ep * 7 + spec.seed) % n_tasks
        state = trajectory(body.state, length, rng_for(spec.seed, _STATE, ep))
        action = trajectory(body.action, length, rng_for(spec.seed, _ACTION, ep))
        path = root / m.DATA_PATH.format(episode_chunk=ep // CHUNKS_SIZE, episode_index=ep)
        _write_parquet(path, state, action, ep, start, task_index, spec.fps)
        for v, key in enumerate(views):
            video = root / m.VIDEO_PATH.format(
                episode_chunk=ep // CHUNKS_SIZE, video_key=key, episode_index=ep
            )
            renderer = FrameRenderer(spec.size, length, rng_for(spec.seed, _VIDEO, ep, v))
            write_video(video, (renderer.frame(i) for i in range(length)), spec.fps, codec)
        states.append(state)
        actions.append(action)
        episodes.append({"episode_index": ep, "tasks": [tasks[task_index]], "length": length})
        start += length
    _write_meta(
        root, spec, tasks, episodes, views, codec, np.concatenate(states), np.concatenate(actions)
    )


def _write_parquet(
    path: Path, state: np.ndarray, action: np.ndarray, ep: int, start: int, task: int, fps: int
) -> None:
    n = len(state)
    frame = np.arange(n, dtype=np.int64)

    def vectors(a: np.ndarray) -> pa.Array:
        return pa.ListArray.from_arrays(
            pa.array(np.arange(n + 1, dtype=np.int32) * a.shape[1]), pa.array(a.ravel())
        )

    table = pa.table({
        m.STATE: vectors(state), m.ACTION: vectors(action),
        "timestamp": pa.array((frame / fps).astype(np.float32)), "frame_index": pa.array(frame),
        "episode_index": pa.array(np.full(n, ep, np.int64)), "index": pa.array(start + frame),
        "task_index": pa.array(np.full(n, task, np.int64)),
    })  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def video_codec() -> str:
    """libx264 where the PyAV wheel has it, else MPEG-4 part 2 (both real inter-frame codecs)."""
    import av

    return "libx264" if "libx264" in av.codecs_available else "mpeg4"


def write_video(path: Path, frames, fps: int, codec: str) -> None:
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = None
        for i, rgb in enumerate(frames):
            if stream is None:
                stream = container.add_stream(codec, rate=fps)
                stream.height, stream.width = rgb.shape[:2]
                stream.pix_fmt = "yuv420p"
                # Fixed GOP, no scene-cut key frames; one thread so the bytes do not depend on the
                # machine. x264's macroblock tree reads uninitialised memory on small frames (64 px
                # videos came out different from run to run), so it is off: same bytes every time.
                opts = {"g": str(GOP), "threads": "1"}
                if codec == "libx264":
                    opts |= {
                        "sc_threshold": "0",
                        "preset": "veryfast",
                        "crf": "23",
                        "x264-params": "mbtree=0",
                    }
                else:
                    stream.bit_rate = 8 * rgb.shape[0] * rgb.shape[1] * fps // 10
                stream.options = opts
            frame = av.VideoFrame.from_ndarray(rgb_to_yuv420p(rgb), format="yuv420p")
            frame.pts = i
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def rgb_to_yuv420p(rgb: np.ndarray) -> np.ndarray:
    """BT.601 limited range, chroma averaged over 2x2 blocks: [H * 3 / 2, W] uint8 planes.

    Done here rather than by swscale: a new scaler per frame cost more than the encoding.
    """
    x = rgb.astype(np.float32)
    y = 16 + x @ np.array([65.481, 128.553, 24.966], np.float32) / 255
    h, w = rgb.shape[:2]
    blocks = x.reshape(h // 2, 2, w // 2, 2, 3).mean(axis=(1, 3))
    u = 128 + blocks @ np.array([-37.797, -74.203, 112.0], np.float32) / 255
    v = 128 + blocks @ np.array([112.0, -93.786, -18.214], np.float32) / 255
    chroma = np.concatenate([u.reshape(-1), v.reshape(-1)]).reshape(h // 2, w)
    return np.clip(np.rint(np.concatenate([y, chroma])), 0, 255).astype(np.uint8)


def _stats(x: np.ndarray) -> dict[str, list[float]]:
    q01, q99 = np.quantile(x, [0.01, 0.99], axis=0)
    values = {
        "mean": x.mean(0),
        "std": x.std(0),
        "min": x.min(0),
        "max": x.max(0),
        "q01": q01,
        "q99": q99,
    }
    return {k: [round(float(f), 6) for f in v] for k, v in values.items()}


def _write_meta(root, spec, tasks, episodes, views, codec, states, actions) -> None:
    body = spec.body

    def names(keys):
        return [f"{name}_{i}" for name, dims, _ in keys for i in range(dims)]

    def slices(keys):
        out, start = {}, 0
        for name, dims, norm in keys:
            out[name] = {"start": start, "end": start + dims, "normalization": norm}
            start += dims
        return out

    video_info = {"video.fps": spec.fps, "video.height": spec.size, "video.width": spec.size,
                  "video.codec": "h264" if codec == "libx264" else codec, "video.pix_fmt": "yuv420p",
                  "video.gop": GOP, "video.is_depth_map": False, "video.channels": 3, "has_audio": False}  # fmt: skip
    features = {key: {"dtype": "video", "shape": [spec.size, spec.size, 3],
                      "names": ["height", "width", "channel"], "info": video_info} for key in views}  # fmt: skip
    features[m.STATE] = {"dtype": "float32", "shape": [states.shape[1]], "names": names(body.state)}
    features[m.ACTION] = {
        "dtype": "float32",
        "shape": [actions.shape[1]],
        "names": names(body.action),
    }
    for col, dtype in (("timestamp", "float32"), ("frame_index", "int64"), ("episode_index", "int64"),
                       ("index", "int64"), ("task_index", "int64")):  # fmt: skip
        features[col] = {"dtype": dtype, "shape": [1], "names": None}
    emb_id = body.default_id if spec.embodiment_id is None else spec.embodiment_id
    info = {
        "codebase_version": "v2.1", "robot_type": body.robot_type,
        "total_episodes": spec.episodes, "total_frames": int(len(states)), "total_tasks": len(tasks),
        "total_videos": spec.episodes * len(views), "total_chunks": (spec.episodes - 1) // CHUNKS_SIZE + 1,
        "chunks_size": CHUNKS_SIZE, "fps": spec.fps, "splits": {"train": f"0:{spec.episodes}"},
        "data_path": m.DATA_PATH, "video_path": m.VIDEO_PATH, "features": features,
        "embodiment": {"tag": body.tag, "id": emb_id},
        "autotune": {"made_by": "autotune data make", "seed": spec.seed},
    }  # fmt: skip
    modality = {
        "state": slices(body.state), "action": slices(body.action),
        "video": {key.rsplit(".", 1)[1]: {"original_key": key} for key in views},
        "annotation": {"human.task_description": {"original_key": "task_index"}},
    }  # fmt: skip
    meta = root / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    _dump(meta / "info.json", info)
    _dump(meta / "modality.json", modality)
    _dump(meta / "stats.json", {m.STATE: _stats(states), m.ACTION: _stats(actions)})
    _lines(meta / "episodes.jsonl", episodes)
    _lines(meta / "tasks.jsonl", [{"task_index": i, "task": t} for i, t in enumerate(tasks)])
    WordVocabulary.build(tasks).save(meta / "tokenizer.json")


def _dump(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")


def _lines(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
