"""``ReadSpec``: what a workload reads of each frame of a LeRobot dataset, at which fixed shapes."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import DataError


@dataclass(frozen=True)
class ReadSpec:
    """The views, image size and vector shapes a workload's batches have.

    Every sample comes out at these shapes whatever the dataset holds, so that samples stack
    into batches and a model built for them takes any dataset that fits.
    """

    views: int
    """Camera views: the first ``views`` video keys of ``meta/modality.json``, in its order."""
    image_size: int
    """Side in pixels of the square images after augmentation."""
    state_dim: int
    """Width the state vector is zero-padded to; a dataset with a wider state is refused."""
    action_dim: int
    """Width each action of the chunk is zero-padded to; a wider action is refused."""
    action_horizon: int
    """Actions of frames ``t .. t + horizon - 1`` (steps past the episode's end are masked)."""
    reader: str = "the workload"
    """Who asks, for error messages (``preset tiny``)."""

    def __post_init__(self) -> None:
        for name in ("views", "image_size", "state_dim", "action_dim", "action_horizon"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise DataError(f"ReadSpec.{name} is {value!r}; allowed: an integer >= 1")
