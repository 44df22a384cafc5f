"""The data path of GR00T N1.6: LeRobot frames (``autotune.data``) at the shapes of the preset
fitted to the dataset (``fit.py``), each made into a sample of the batch of ``batch.py`` (the
task's tokens laid out with the image placeholders, the state as a one-step history)."""

from __future__ import annotations

from pathlib import Path

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
from autotune.data.meta import INFO, TOKENIZER
from autotune.errors import DataError
from autotune.workloads.gr00t_n16.batch import layout_tokens
from autotune.workloads.gr00t_n16.fit import fit_preset
from autotune.workloads.gr00t_n16.presets import Gr00tPreset
from autotune.workloads.gr00t_n16.text import WordTokenizer

# Upstream N1.6's projector slot of each embodiment tag (EMBODIMENT_TAG_TO_PROJECTOR_INDEX in
# gr00t/model/gr00t_n1d6/processing_gr00t_n1d6.py); a dataset that names no id takes its tag's.
PROJECTOR_INDEX = {"robocasa_panda_omron": 13, "gr1": 20, "behavior_r1_pro": 24, "unitree_g1": 8,
                   "libero_panda": 2, "oxe_google": 0, "oxe_widowx": 1, "oxe_droid": 16, "new_embodiment": 10}  # fmt: skip


def read_spec(preset: Gr00tPreset) -> ReadSpec:
    h, w = preset.image_shape
    return ReadSpec(
        views=preset.views, image_size=h, image_width=None if w == h else w, state_dim=preset.state_dim,
        action_dim=preset.action_dim, action_horizon=preset.action_horizon, reader=f"preset {preset.name}",
    )  # fmt: skip


class Gr00tDataset(LeRobotDataset):
    """``dataset[(draw, index)]`` is one sample in the keys, shapes and dtypes of ``batch.py``, at
    ``self.preset``: ``preset`` fitted to the dataset."""

    def __init__(
        self,
        root: str | Path,
        preset: Gr00tPreset,
        *,
        video_backend: str = "pyav",
        seed: int = 0,
        embodiment_id: int | None = None,
    ) -> None:
        meta = load_meta(root)
        self.preset = preset = fit_preset(preset, meta)
        if embodiment_id is None and meta.embodiment_id is None:
            embodiment_id = PROJECTOR_INDEX.get(
                meta.embodiment_tag, PROJECTOR_INDEX["new_embodiment"]
            )
        super().__init__(
            meta,
            read_spec(preset),
            video_backend=video_backend,
            seed=seed,
            embodiment_id=embodiment_id,
        )
        if not 0 <= self.embodiment_id < preset.num_embodiments:
            raise DataError(
                f"{self.meta.root / INFO}: embodiment id {self.embodiment_id} is not in [0, {preset.num_embodiments})"
            )
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


def build_loader(
    preset: Gr00tPreset,
    data_cfg: DataConfig,
    batch_size: int,
    *,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
) -> HostLoader:
    """Endless host batches of ``preset``'s shapes, sample order seeded and sharded by rank.

    ``data_cfg.dataset`` null makes (once) a dataset of ``data_cfg.episodes`` episodes in the cache.
    """
    root = dataset_root(data_cfg, read_spec(preset))
    dataset = Gr00tDataset(root, preset, video_backend=data_cfg.video_backend or "pyav", seed=seed)
    return build_host_loader(
        dataset, data_cfg, batch_size, seed=seed, rank=rank, world_size=world_size
    )
