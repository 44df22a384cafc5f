"""Seeded synthetic content of a made dataset: embodiments, instructions, trajectories, frames.

Frames are moving shapes over a drifting gradient plus sensor noise, so that an encoder has real
motion and texture to code and a decoder real work to do; trajectories are smooth per sub-key.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VIEW_NAMES = ("front", "wrist", "left", "right", "top", "back")
PROJECTOR_SLOTS = 32
"""Embodiment ids a made dataset may carry: the projector slots of GR00T N1.6 and N1.7 (their
presets' ``num_embodiments``), which refuse a dataset of another id when they train."""


@dataclass(frozen=True)
class Embodiment:
    tag: str
    robot_type: str
    default_id: int
    state: tuple[tuple[str, int, str], ...]  # (sub-key, dims, normalization)
    action: tuple[tuple[str, int, str], ...]


EMBODIMENTS = {
    e.robot_type: e
    for e in (
        Embodiment(
            "libero_panda", "panda", 1,
            state=(("eef_position", 3, "min_max"), ("eef_rotation", 3, "mean_std"), ("gripper_qpos", 2, "min_max")),
            action=(("eef_position_delta", 3, "min_max"), ("eef_rotation_delta", 3, "min_max"), ("gripper", 1, "min_max")),
        ),
        Embodiment(
            "gr1", "gr1", 2,
            state=(("left_arm", 7, "min_max"), ("right_arm", 7, "min_max"), ("left_hand", 6, "min_max"),
                   ("right_hand", 6, "min_max"), ("waist", 3, "mean_std")),
            action=(("left_arm", 7, "min_max"), ("right_arm", 7, "min_max"), ("left_hand", 6, "min_max"),
                    ("right_hand", 6, "min_max"), ("waist", 3, "mean_std")),
        ),
        Embodiment(
            "so100", "so100", 3,
            state=(("single_arm", 5, "min_max"), ("gripper", 1, "min_max")),
            action=(("single_arm", 5, "min_max"), ("gripper", 1, "min_max")),
        ),
    )
}  # fmt: skip

_VERBS = ("put", "place", "move", "push", "pick up", "stack")
_OBJECTS = (
    "the black bowl",
    "the red mug",
    "the ketchup bottle",
    "the alphabet soup",
    "the cream cheese box",
    "the white plate",
    "the wooden tray",
    "the butter",
    "the orange juice",
    "the yellow sponge",
)
_PLACES = ("on the plate", "in the basket", "on top of the cabinet", "into the top drawer", "on the stove",
           "to the left of the bowl", "next to the microwave", "onto the wine rack")  # fmt: skip


def rng_for(seed: int, *keys: int) -> np.random.Generator:
    """An independent stream for each (seed, part, episode, view): content never shifts together."""
    return np.random.default_rng(np.random.SeedSequence([seed, *keys]))


def make_tasks(n: int, rng: np.random.Generator) -> list[str]:
    tasks: list[str] = []
    while len(tasks) < n:
        verb, obj, place = (str(rng.choice(a)) for a in (_VERBS, _OBJECTS, _PLACES))
        if verb == "pick up":
            text = f"Pick up {obj} and place it {place}."
        else:
            text = f"{verb.capitalize()} {obj} {place}."
        if text not in tasks:
            tasks.append(text)
    return tasks


def trajectory(
    keys: tuple[tuple[str, int, str], ...], length: int, rng: np.random.Generator
) -> np.ndarray:
    """[length, dims] float32: sums of slow sines per dimension; grippers switch between two values."""
    t = np.arange(length, dtype=np.float64)[:, None] / max(length - 1, 1)
    parts = []
    for name, dims, _ in keys:
        if "gripper" in name:
            switch = rng.uniform(0.3, 0.7)
            open_close = np.where(t < switch, -1.0, 1.0)
            parts.append(np.repeat(open_close * rng.uniform(0.02, 1.0), dims, axis=1))
            continue
        freq = rng.uniform(0.3, 2.0, dims)
        phase = rng.uniform(0, 2 * np.pi, dims)
        amp = rng.uniform(0.05, 1.5, dims)
        offset = rng.normal(0, 0.5, dims)
        parts.append(
            offset
            + amp * np.sin(2 * np.pi * freq * t + phase)
            + rng.normal(0, 0.01, (length, dims))
        )
    return np.concatenate(parts, axis=1).astype(np.float32)


class FrameRenderer:
    """Frames of one (episode, view): ``frame(i)`` is uint8 [height, width, 3]."""

    def __init__(self, shape: int | tuple[int, int], length: int, rng: np.random.Generator) -> None:
        self.shape = (shape, shape) if isinstance(shape, int) else tuple(shape)
        self.length, self.rng = length, rng
        h, w = self.shape
        self.yy, self.xx = np.mgrid[0:h, 0:w].astype(np.float32) / min(h, w)
        self.base = rng.uniform(40, 200, 3).astype(np.float32)
        self.tilt = rng.uniform(-80, 80, (3, 2)).astype(np.float32)
        n = int(rng.integers(3, 6))
        self.shapes = [
            {
                "circle": bool(rng.random() < 0.5),
                "color": rng.uniform(0, 255, 3).astype(np.float32),
                "radius": float(rng.uniform(0.06, 0.18)),
                "center": rng.uniform(0.25, 0.75, 2),
                "swing": rng.uniform(0.1, 0.25, 2),
                "speed": rng.uniform(0.5, 2.0, 2) * 2 * np.pi,
                "phase": rng.uniform(0, 2 * np.pi, 2),
            }
            for _ in range(n)
        ]

    def frame(self, i: int) -> np.ndarray:
        s = i / max(self.length - 1, 1)
        drift = 0.5 + 0.5 * np.sin(2 * np.pi * s)
        img = np.empty((*self.shape, 3), np.float32)
        for c in range(3):
            img[..., c] = (
                self.base[c] + self.tilt[c, 0] * (self.xx - drift) + self.tilt[c, 1] * self.yy
            )
        for sh in self.shapes:
            cy, cx = sh["center"] + sh["swing"] * np.sin(sh["speed"] * s + sh["phase"])
            r = sh["radius"]
            if sh["circle"]:
                mask = (self.yy - cy) ** 2 + (self.xx - cx) ** 2 < r * r
            else:
                mask = (np.abs(self.yy - cy) < r) & (np.abs(self.xx - cx) < r * 0.7)
            img[mask] = sh["color"]
        img += 4.0 * self.rng.standard_normal(img.shape, dtype=np.float32)
        return np.clip(img, 0, 255).astype(np.uint8)
