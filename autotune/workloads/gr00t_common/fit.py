"""What fitting a GR00T preset to a dataset checks whatever the model: the dataset's vectors fit."""

from __future__ import annotations

from autotune.data.meta import INFO, DatasetMeta
from autotune.errors import DataError


def check_vectors(preset, meta: DatasetMeta) -> None:
    """One line naming the keys where the dataset's state or action is wider than ``preset`` takes."""
    info = meta.root / INFO
    for part, dim, room in (
        ("state", meta.state_dim, preset.state_dim),
        ("action", meta.action_dim, preset.action_dim),
    ):
        if dim > room:
            keys = meta.state_keys if part == "state" else meta.action_keys
            names = ", ".join(f"{k.name} ({k.source}[{k.start}:{k.end}])" for k in keys)
            raise DataError(
                f"{info}: {part} {names} has {dim} dims; preset {preset.name} takes at most {room} (padded to {room})"
            )
