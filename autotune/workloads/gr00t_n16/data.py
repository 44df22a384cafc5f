"""The data path of GR00T N1.6: LeRobot frames (``autotune.data``) at the preset's shapes, each
made into a sample of the batch of ``batch.py`` (the task's tokens laid out with the image
placeholders, the state as a one-step history)."""

from __future__ import annotations

from pathlib import Path

import torch

from autotune.config import DataConfig
from autotune.data import HostLoader, LeRobotDataset, ReadSpec, build_host_loader, dataset_root
from autotune.data.meta import INFO, TOKENIZER
from autotune.errors import DataError
from autotune.workloads.gr00t_n16.batch import layout_tokens
from autotune.workloads.gr00t_n16.presets import Gr00tPreset
from autotune.workloads.gr00t_n16.text import WordTokenizer


def read_spec(preset: Gr00tPreset) -> ReadSpec:
    return ReadSpec(
        views=preset.views, image_size=preset.image_size, state_dim=preset.state_dim,
        action_dim=preset.action_dim, action_horizon=preset.action_horizon, reader=f"preset {preset.name}",
    )  # fmt: skip


class Gr00tDataset(LeRobotDataset):
    """``dataset[(draw, index)]`` is one sample in the keys, shapes and dtypes of ``batch.py``."""

    def __init__(
        self,
        root: str | Path,
        preset: Gr00tPreset,
        *,
        video_backend: str = "pyav",
        seed: int = 0,
        embodiment_id: int | None = None,
    ) -> None:
        super().__init__(
            root, read_spec(preset), video_backend=video_backend, seed=seed, embodiment_id=embodiment_id
        )
        self.preset = preset
        if not 0 <= self.embodiment_id < preset.num_embodiments:
            raise DataError(
                f"{self.meta.root / INFO}: embodiment id {self.embodiment_id} is not in [0, {preset.num_embodiments})"
            )
        tokenizer = WordTokenizer.load(self.meta.root / TOKENIZER)
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
    return build_host_loader(dataset, data_cfg, batch_size, seed=seed, rank=rank, world_size=world_size)
