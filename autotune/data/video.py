"""Random access to frames of mp4 files, as DataLoader workers do it.

A frame is found by seeking to the key frame at or before it and decoding forward, which is what
makes random access to H.264 costly (on average half a GOP decoded per frame). Readers are opened
lazily, per process, by :class:`ReaderPool`: an open container is never shared across ``fork``.

Backends: ``pyav`` (default), ``opencv`` (``cv2``) and ``torchcodec``, where installed. PyAV's
wheel brings its own FFmpeg: AV1 (lerobot's default codec) is decoded by libdav1d, H.264 and HEVC
by FFmpeg's decoders. opencv-python 4.12's FFmpeg opens AV1 files but decodes no frame of them;
torchcodec needs the system's FFmpeg libraries. In a v3.0 file the frame index is the frame's
place in the file (the episode's first frame plus the frame within the episode).
"""

from __future__ import annotations

import importlib.util
import os
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from autotune.data.files import require_file
from autotune.errors import DataError

BACKENDS = ("pyav", "opencv", "torchcodec")
_MODULES = {"pyav": "av", "opencv": "cv2", "torchcodec": "torchcodec"}


class FrameReader(Protocol):
    num_frames: int

    def frame(self, index: int) -> torch.Tensor:
        """Frame ``index`` as uint8 [3, H, W] (RGB)."""

    def close(self) -> None: ...


def check_backend(backend: str) -> None:
    """Raise :class:`DataError` unless ``backend`` is known and importable here."""
    if backend not in BACKENDS:
        raise DataError(f"video backend {backend!r} is unknown; known backends: {list(BACKENDS)}")
    if importlib.util.find_spec(_MODULES[backend]) is None:
        raise DataError(
            f"video backend {backend!r} is not installed (no module {_MODULES[backend]!r}); "
            f"install it or use video_backend: pyav"
        )


def open_reader(backend: str, path: Path, fps: float) -> FrameReader:
    check_backend(backend)
    cls = {"pyav": PyAVReader, "opencv": OpenCVReader, "torchcodec": TorchCodecReader}[backend]
    require_file(path)
    try:
        return cls(path, fps)
    except DataError:
        raise
    except Exception as exc:  # every decoder library has its own errors
        raise DataError(f"{path}: cannot open the video ({describe(exc, path)})") from None


def describe(exc: Exception, path: Path) -> str:
    """The decoder's error without the path it repeats."""
    return f"{type(exc).__name__}: {' '.join(str(exc).replace(f': {str(path)!r}', '').split())}"


def _past_end(path: Path, index: int, n: int) -> DataError:
    return DataError(f"{path}: frame {index} is past the end of the video ({n} frames)")


class PyAVReader:
    """Decodes from the key frame at or before the frame asked for. On the way there, H.264 and HEVC
    skip the frames that no other frame refers to (most B-frames): they are never shown and nothing
    decoded after them reads them, so the frame returned has the same bytes. Those two decoders read
    ``skip_frame`` per frame; others (libdav1d reads it once, when it opens) decode every frame."""

    SKIPPING = ("h264", "hevc")

    def __init__(self, path: Path, fps: float) -> None:
        import av

        self.path, self.fps = path, fps
        self.container = av.open(str(path))
        if not self.container.streams.video:
            self.container.close()
            raise DataError(f"{path}: no video stream")
        self.stream = self.container.streams.video[0]
        # One decoding thread per worker: parallelism comes from the number of workers.
        self.stream.codec_context.thread_count = 1
        self.num_frames = int(self.stream.frames)
        self.skips = self.stream.codec_context.name in self.SKIPPING
        self.decoded = 0
        """Frames the decoder has given out so far (the skipped ones are not)."""

    def frame(self, index: int) -> torch.Tensor:
        if not 0 <= index < self.num_frames:
            raise _past_end(self.path, index, self.num_frames)
        try:
            self.container.seek(
                int(round(index / self.fps / self.stream.time_base)),
                stream=self.stream,
                backward=True,
            )
            found = self._decode_to(index)
        except Exception as exc:
            raise DataError(
                f"{self.path}: cannot decode frame {index} ({describe(exc, self.path)})"
            ) from None
        if found is None:
            raise DataError(f"{self.path}: frame {index} not found: the stream ends before it")
        return torch.from_numpy(found.to_ndarray(format="rgb24")).permute(2, 0, 1)

    def _decode_to(self, index: int):
        """The first frame at or after ``index`` in display order, decoding from where the seek left."""
        codec = self.stream.codec_context
        try:
            for packet in self.container.demux(self.stream):
                # a packet shown before the frame asked for is needed only if it is a reference
                before = (
                    packet.pts is not None
                    and self._place(float(packet.pts * packet.time_base)) < index
                )
                codec.skip_frame = "NONREF" if self.skips and before else "DEFAULT"
                for frame in codec.decode(packet):
                    self.decoded += 1
                    if self._place(frame.time) >= index:
                        return frame
            return None
        finally:
            codec.skip_frame = "DEFAULT"

    def _place(self, seconds: float) -> int:
        return round(float(seconds) * self.fps)

    def close(self) -> None:
        self.container.close()


class OpenCVReader:
    def __init__(self, path: Path, fps: float) -> None:
        import cv2

        self.path, self._cv2 = path, cv2
        self.cap = cv2.VideoCapture(str(path))
        if not self.cap.isOpened():
            raise DataError(f"{path}: OpenCV cannot open the video")
        self.num_frames = int(self.cap.get(cv2.CAP_PROP_FRAME_COUNT))

    def frame(self, index: int) -> torch.Tensor:
        if not 0 <= index < self.num_frames:
            raise _past_end(self.path, index, self.num_frames)
        self.cap.set(self._cv2.CAP_PROP_POS_FRAMES, index)  # seeks to a key frame, decodes forward
        ok, bgr = self.cap.read()
        if not ok:
            raise DataError(
                f"{self.path}: OpenCV cannot decode frame {index} (opencv-python's FFmpeg decodes no AV1; "
                "video_backend: pyav decodes AV1, H.264 and HEVC)"
            )
        return torch.from_numpy(np.ascontiguousarray(bgr[:, :, ::-1])).permute(2, 0, 1)

    def close(self) -> None:
        self.cap.release()


class TorchCodecReader:
    def __init__(self, path: Path, fps: float) -> None:
        from torchcodec.decoders import VideoDecoder

        self.path = path
        self.decoder = VideoDecoder(str(path), seek_mode="exact", dimension_order="NCHW")
        self.num_frames = int(self.decoder.metadata.num_frames)

    def frame(self, index: int) -> torch.Tensor:
        if not 0 <= index < self.num_frames:
            raise _past_end(self.path, index, self.num_frames)
        try:
            return self.decoder[index]
        except Exception as exc:
            raise DataError(
                f"{self.path}: cannot decode frame {index} ({describe(exc, self.path)})"
            ) from None

    def close(self) -> None:
        self.decoder = None


class ReaderPool:
    """Readers opened on first use in the calling process, at most ``capacity`` kept open."""

    def __init__(self, backend: str, fps: float, capacity: int = 64) -> None:
        check_backend(backend)
        self.backend, self.fps, self.capacity = backend, fps, capacity
        self._pid: int | None = None
        self._readers: OrderedDict[Path, FrameReader] = OrderedDict()

    def get(self, path: Path) -> FrameReader:
        if self._pid != os.getpid():  # a forked child: readers of the parent are not ours to use
            self._pid, self._readers = os.getpid(), OrderedDict()
        reader = self._readers.get(path)
        if reader is None:
            reader = self._readers[path] = open_reader(self.backend, path, self.fps)
            if len(self._readers) > self.capacity:
                self._readers.popitem(last=False)[1].close()
        self._readers.move_to_end(path)
        return reader

    def __getstate__(self) -> dict:  # spawn pickles the dataset: send no open readers
        return {**self.__dict__, "_pid": None, "_readers": OrderedDict()}
