"""Random access to frames: the PyAV reader skips unreferenced frames on its way to the one asked for
(H.264, HEVC) and must return the very frame a plain decode from the first frame gives."""

from __future__ import annotations

import random
from pathlib import Path

import av
import numpy as np
import pytest

from autotune.data import MakeSpec, make_dataset
from autotune.data.video import PyAVReader

ENCODERS = {"h264": "libx264", "hevc": "libx265", "av1": "libsvtav1"}


def _video(tmp_path: Path, codec: str, fmt: str = "v2.1") -> Path:
    if ENCODERS[codec] not in av.codecs_available:
        pytest.skip(f"this PyAV has no {ENCODERS[codec]}")
    root = make_dataset(
        tmp_path / codec, MakeSpec(episodes=2, views=1, size=64, frames=45, codec=codec, format=fmt)
    )
    return sorted(root.glob("videos/**/*.mp4"))[-1]


def _every_frame(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]


@pytest.mark.parametrize(
    "codec,fmt", [("h264", "v2.1"), ("h264", "v3.0"), ("hevc", "v2.1"), ("av1", "v2.1")]
)
def test_each_frame_in_any_order_is_the_plain_decodes(tmp_path, codec, fmt):
    path = _video(tmp_path, codec, fmt)
    truth = _every_frame(path)
    reader = PyAVReader(path, fps=20)
    # the skipping path where the decoder reads skip_frame per frame, and only there
    assert reader.skips == (codec != "av1")
    order = list(range(len(truth))) * 2
    random.Random(0).shuffle(order)
    for i in order + sorted(order)[::-1]:
        got = reader.frame(i).permute(1, 2, 0).numpy()
        assert np.array_equal(got, truth[i]), (codec, i)
    reader.close()


def test_the_reader_leaves_unreferenced_frames_undecoded(tmp_path):
    """The test above passes with skipping off too: the same random reads decode fewer frames with it
    (x264 writes B-frames that nothing refers to)."""
    path = _video(tmp_path, "h264")
    order = list(range(45))
    random.Random(1).shuffle(order)
    counts = {}
    for skips in (False, True):
        reader = PyAVReader(path, fps=20)
        reader.skips = skips
        for i in order:
            reader.frame(i)
        counts[skips] = reader.decoded
        reader.close()
    assert counts[True] < 0.8 * counts[False]
