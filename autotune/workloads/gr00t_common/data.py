"""The data path of the GR00T workloads: LeRobot frames (``autotune.data``) at the shapes of a
preset fitted to the dataset, each made into a sample of the batch of ``batch.py`` (the task's
tokens laid out with the image placeholders, the state as a one-step history).

A model's data module subclasses :class:`Gr00tDataset` with what differs between models: how a
preset fits a dataset (``fit``), what a preset reads of each frame (``spec_for``, the image geometry
included) and upstream's projector slot of each embodiment tag (``projector_index``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch

from autotune.config import DataConfig
from autotune.data import (
    HostLoader,
    LeRobotDataset,
    ReadSpec,
    build_host_loader,
    dataset_root,
    load_meta,
)
from autotune.data.meta import INFO, TOKENIZER, DatasetMeta
from autotune.errors import DataError
from autotune.workloads.gr00t_common.batch import layout_tokens
from autotune.workloads.gr00t_common.text import WordTokenizer


class Gr00tDataset(LeRobotDataset):
    """``dataset[(draw, index)]`` is one sample in the keys, shapes and dtypes of ``batch.py``, at
    ``self.preset``: ``preset`` fitted to the dataset."""

    projector_index: ClassVar[dict[str, int]]
    """Upstream's projector slot of each embodiment tag; a dataset that names no id takes its tag's
    (``new_embodiment``'s for a tag upstream does not know)."""
    fit: ClassVar[Callable[[Any, DatasetMeta], Any]]
    """(preset, dataset's meta) -> the preset fitted to the dataset."""
    spec_for: ClassVar[Callable[[Any], ReadSpec]]
    """preset -> what it reads of each frame."""

    def __init__(self, root: str | Path, preset, *, video_backend: str = "pyav", seed: int = 0,
                 embodiment_id: int | None = None) -> None:  # fmt: skip
        meta = load_meta(root)
        self.preset = preset = type(self).fit(preset, meta)
        slot = embodiment_slot(meta, self.projector_index, preset, embodiment_id)
        super().__init__(meta, type(self).spec_for(preset), video_backend=video_backend, seed=seed,
                         embodiment_id=slot)  # fmt: skip
        tokenizer = WordTokenizer.for_dataset(self.meta.root / TOKENIZER, self.meta.tasks.values())
        self.text_ids = {
            i: tokenizer.encode(task, preset.vocab_size) for i, task in self.meta.tasks.items()
        }

    def sample(self, episode: int, frame: int, draw: int = 0) -> dict[str, torch.Tensor]:
        s = super().sample(episode, frame, draw)
        return {"images": s["images"], **self.text(int(s["task_index"])), "state": s["state"][None],
                "action": s["action"], "action_mask": s["action_mask"], "embodiment_id": s["embodiment_id"]}  # fmt: skip

    def text(self, task_index: int) -> dict[str, torch.Tensor]:
        ids, n = layout_tokens(self.text_ids[task_index], self.preset)
        mask = torch.zeros(self.preset.seq_len, dtype=torch.bool)
        mask[:n] = True
        return {"input_ids": torch.tensor(ids, dtype=torch.int64), "attention_mask": mask}


def embodiment_slot(meta: DatasetMeta, projector_index: dict[str, int], preset,
                    given: int | None = None) -> int:  # fmt: skip
    """The projector slot of a dataset's samples: ``given``, else info.json's id, else upstream's
    slot of its tag (``new_embodiment``'s for a tag upstream does not know); a DataError naming
    info.json where ``preset`` has no such slot."""
    slot = meta.embodiment_id if given is None else given
    if slot is None:
        slot = projector_index.get(meta.embodiment_tag, projector_index["new_embodiment"])
    if not 0 <= slot < preset.num_embodiments:
        raise DataError(
            f"{meta.root / INFO}: embodiment id {slot} is not in [0, {preset.num_embodiments})"
        )
    return slot


def read_spec(preset, **images) -> ReadSpec:
    """What ``preset`` reads of each frame: its views, its vectors' widths and horizon, and the
    image geometry ``images`` gives (``image_size`` and ``image_width`` or ``augment``)."""
    return ReadSpec(views=preset.views, state_dim=preset.state_dim, action_dim=preset.action_dim,
                    action_horizon=preset.action_horizon, reader=f"preset {preset.name}", **images)  # fmt: skip


def build_loader(dataset_cls: type[Gr00tDataset], preset, data_cfg: DataConfig, batch_size: int, *,
                 seed: int, rank: int = 0, world_size: int = 1) -> HostLoader:  # fmt: skip
    """Endless host batches of ``preset``'s shapes from ``dataset_cls``, sample order seeded and sharded
    by rank. ``data_cfg.dataset`` null makes (once) a dataset of ``data_cfg.episodes`` episodes in the
    cache."""
    root = dataset_root(data_cfg, dataset_cls.spec_for(preset))
    backend = data_cfg.video_backend or "pyav"
    dataset = dataset_cls(root, preset, video_backend=backend, seed=seed)
    return build_host_loader(
        dataset, data_cfg, batch_size, seed=seed, rank=rank, world_size=world_size
    )
