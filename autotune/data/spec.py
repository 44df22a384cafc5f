"""``ReadSpec``: what a workload reads of each frame of a LeRobot dataset, at which fixed shapes."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.data.augment import AugmentSpec
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
    """Height in pixels of the images after augmentation (and their width unless ``image_width``)."""
    state_dim: int
    """Width the state vector is zero-padded to; a dataset with a wider state is refused."""
    action_dim: int
    """Width each action of the chunk is zero-padded to; a wider action is refused."""
    action_horizon: int
    """Actions of frames ``t .. t + horizon - 1`` (steps past the episode's end are masked)."""
    reader: str = "the workload"
    """Who asks, for error messages (``preset tiny``)."""
    image_width: int | None = None
    """Width in pixels of the images after augmentation; ``None``: square (``image_size``)."""
    augment: AugmentSpec | None = None
    """How frames become images of ``image_shape``; ``None``: GR00T N1.6's recipe (``augment.py``)."""

    def __post_init__(self) -> None:
        for name in (
            "views",
            "image_size",
            "state_dim",
            "action_dim",
            "action_horizon",
            "image_width",
        ):
            value = getattr(self, name)
            if (name != "image_width" or value is not None) and (
                not isinstance(value, int) or value < 1
            ):
                raise DataError(f"ReadSpec.{name} is {value!r}; allowed: an integer >= 1")

        if self.augment is not None and self.augment.image_shape != self.image_shape:
            raise DataError(
                f"ReadSpec.augment makes {self.augment.image_shape} images; the spec reads {self.image_shape}"
            )

    @property
    def image_shape(self) -> tuple[int, int]:
        """(height, width) of the images a sample holds."""
        return self.image_size, self.image_width or self.image_size
