"""Cross-check with the lerobot library itself, in a scratch environment (not part of the test suite:
lerobot does not install beside this project's torch: 0.4.x pins torch < 2.11).

    python3 -m venv /tmp/lr04 && /tmp/lr04/bin/pip install lerobot==0.4.4      # writes v3.0
    python3 -m venv /tmp/lr03 && /tmp/lr03/bin/pip install lerobot==0.3.3 torch==2.7.1 torchvision==0.22.1  # v2.1
    /tmp/lr04/bin/python tests/data/lerobot_interop.py write /tmp/lr-v30   # then: autotune data check /tmp/lr-v30
    python -m autotune data make /tmp/at-v30 --episodes 3 --format v3.0 --codec av1 --no-extras --size 64
    HF_HUB_OFFLINE=1 /tmp/lr04/bin/python tests/data/lerobot_interop.py read /tmp/at-v30

``write`` records 3 episodes (12, 9, 15 frames at 10 fps) of two 64x48 cameras, an 8-dim state
and a 7-dim action with ``LeRobotDataset.create`` / ``add_frame`` / ``save_episode``; ``read``
opens a dataset with ``LeRobotDataset`` and prints a few samples and its stats.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

VIEWS = ("front", "wrist")


def write(root: Path) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    shutil.rmtree(root, ignore_errors=True)
    features = {
        "observation.state": {
            "dtype": "float32",
            "shape": (8,),
            "names": [f"s{i}" for i in range(8)],
        },
        "action": {"dtype": "float32", "shape": (7,), "names": [f"a{i}" for i in range(7)]},
    }
    for v in VIEWS:
        features[f"observation.images.{v}"] = {"dtype": "video", "shape": (48, 64, 3),
                                               "names": ["height", "width", "channels"]}  # fmt: skip
    ds = LeRobotDataset.create(
        repo_id="local/test", fps=10, root=root, features=features, robot_type="so100"
    )
    rng = np.random.default_rng(0)
    for ep, n in enumerate([12, 9, 15]):
        for _ in range(n):
            frame = {"observation.state": rng.normal(size=8).astype(np.float32),
                     "action": rng.normal(size=7).astype(np.float32)}  # fmt: skip
            for v in VIEWS:
                frame[f"observation.images.{v}"] = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
            task = ["pick the cube", "place the cube"][ep % 2]
            try:  # lerobot 0.3: add_frame(frame, task); 0.4: the task inside the frame
                ds.add_frame(frame, task=task)
            except TypeError:
                ds.add_frame({**frame, "task": task})
        ds.save_episode()
    if hasattr(ds, "finalize"):
        ds.finalize()
    print("written", root, ds.meta.info["codebase_version"])


def read(root: Path) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("local/test", root=root, video_backend="pyav")
    print(ds.meta.info["codebase_version"], ds.num_episodes, "episodes", ds.num_frames, "frames")
    for i in (0, len(ds) // 2, len(ds) - 1):
        item = ds[i]
        print(i, {k: tuple(v.shape) for k, v in item.items() if hasattr(v, "shape")}, item["task"])
    print("stats of", sorted(k for k in ds.meta.stats if k in ("observation.state", "action")))


if __name__ == "__main__":
    {"write": write, "read": read}[sys.argv[1]](Path(sys.argv[2]))
