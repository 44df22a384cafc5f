"""Encoding the videos of a made dataset with PyAV's FFmpeg: H.264, HEVC or AV1.

``av1`` is encoded as lerobot encodes it (libsvtav1, a key frame every 2 frames, crf 30, preset
12); ``h264`` as a camera records (libx264, a key frame every 30 frames, B-frames; MPEG-4 part 2
where the wheel lacks libx264); ``hevc`` with libx265 (key frame every 30 frames). One thread
each, so that the bytes do not depend on the machine. A :class:`VideoWriter` stays open across
episodes (a v3.0 file holds many); each episode starts on a key frame, as lerobot's concatenated
per-episode files do.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autotune.errors import DataError

CODECS = ("h264", "hevc", "av1")
GOP = 30


@dataclass(frozen=True)
class Encoder:
    name: str
    """FFmpeg encoder."""
    codec: str
    """What info.json's ``video.codec`` says (the stream's codec)."""
    gop: int
    options: dict[str, str]


def encoder_for(codec: str) -> Encoder:
    """The encoder of ``codec`` that this PyAV wheel has; a missing one raises, naming the codec."""
    import av

    if codec not in CODECS:
        raise DataError(f"data make: --codec {codec!r} is not allowed; allowed: {list(CODECS)}")
    have = av.codecs_available
    if codec == "h264":
        # x264's macroblock tree reads uninitialised memory on small frames (64 px videos came out
        # different from run to run), so it is off: same bytes every time. No scene-cut key frames.
        if "libx264" in have:
            opts = {
                "preset": "veryfast",
                "crf": "23",
                "sc_threshold": "0",
                "x264-params": "mbtree=0",
            }
            return Encoder("libx264", "h264", GOP, opts)
        return Encoder("mpeg4", "mpeg4", GOP, {})
    name = {"hevc": "libx265", "av1": "libsvtav1"}[codec]
    if name not in have:
        raise DataError(f"data make: --codec {codec}: this PyAV's FFmpeg has no {name} encoder")
    if codec == "av1":
        os.environ.setdefault(
            "SVT_LOG", "1"
        )  # SVT-AV1 prints its configuration unless told: errors only
    if codec == "hevc":
        return Encoder(
            name,
            "hevc",
            GOP,
            {
                "preset": "veryfast",
                "crf": "28",
                "x265-params": "pools=1:frame-threads=1:log-level=error",
            },
        )
    return Encoder(name, "av1", 2, {"preset": "12", "crf": "30", "svtav1-params": "lp=1"})


class VideoWriter:
    """Frames appended episode by episode into one mp4 (``frames`` counts them)."""

    def __init__(self, path: Path, encoder: Encoder, fps: int, height: int, width: int) -> None:
        import av

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.frames = path, 0
        self.encoded = 0
        """Bytes of the packets the encoder has given out (the muxer may hold some yet)."""
        self.container = av.open(str(path), "w", options={"movflags": "faststart"})
        self.stream = self.container.add_stream(encoder.name, rate=fps)
        self.stream.height, self.stream.width, self.stream.pix_fmt = height, width, "yuv420p"
        opts = {"g": str(encoder.gop), "threads": "1", **encoder.options}
        if encoder.name == "mpeg4":
            self.stream.bit_rate = 8 * height * width * fps // 10
        self.stream.options = opts

    def add_episode(self, frames) -> int:
        """Encode ``frames`` (RGB uint8 [H, W, 3] each), the first as a key frame; returns how many."""
        import av
        from av.video.frame import PictureType

        n = 0
        for rgb in frames:
            frame = av.VideoFrame.from_ndarray(rgb_to_yuv420p(rgb), format="yuv420p")
            frame.pts = self.frames + n
            if n == 0:
                frame.pict_type = PictureType.I
            with same_scheduling():
                packets = self.stream.encode(frame)
                self.container.mux(packets)
            self.encoded += sum(p.size for p in packets)
            n += 1
        self.frames += n
        return n

    def close(self) -> None:
        with same_scheduling():
            try:
                self.container.mux(self.stream.encode(None))
            finally:
                self.container.close()


@contextlib.contextmanager
def same_scheduling() -> Iterator[None]:
    """Keep the calling thread's scheduling policy through a call into an encoder.

    SVT-AV1, when the process runs as root, moves the thread that starts it to real-time scheduling
    (SCHED_FIFO, priority 99). Every process started from that thread afterwards inherits it, and a
    busy one then holds its core against everything of normal priority: after ``autotune data make
    --codec av1`` in a process run as root (a container, CI), busy child processes stalled the
    machine for minutes.
    """
    if not hasattr(os, "sched_getscheduler"):  # not Linux
        yield
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        yield
    finally:
        if os.sched_getscheduler(0) != policy or os.sched_getparam(0) != param:
            os.sched_setscheduler(0, policy, param)


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
