"""The torch ``Dataset`` of GR00T N1.6 samples over a LeRobot v2 dataset on disk.

A sample is frame ``t`` of episode ``e``: each view's frame decoded from its mp4 (seek to the key
frame, decode forward), augmented (augment.py), the task's tokens laid out with the image
placeholders, the normalised state at ``t`` and the action chunk ``t .. t + horizon - 1`` (steps
past the episode's end zero and masked). Keys and shapes are those of
``autotune.workloads.gr00t_n16.batch``. Videos and parquet files are opened lazily in the process
that reads them (a DataLoader worker), never shared across ``fork``.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from autotune.data.augment import AugmentSpec, augment, short_edge_for
from autotune.data.episode import EpisodeData, Normalizer, read_episode
from autotune.data.meta import ACTION, INFO, STATE, TOKENIZER, load_meta
from autotune.data.sampler import sample_generator
from autotune.data.text import WordTokenizer
from autotune.data.video import ReaderPool
from autotune.errors import DataError
from autotune.workloads.gr00t_n16.batch import layout_tokens
from autotune.workloads.gr00t_n16.presets import Gr00tPreset

_EPISODE_CACHE = 256


class LeRobotDataset(Dataset):
    """``dataset[(draw, index)]`` (or ``dataset[index]``, draw = index) is one sample's dict."""

    def __init__(
        self,
        root: str | Path,
        preset: Gr00tPreset,
        *,
        video_backend: str = "pyav",
        seed: int = 0,
        embodiment_id: int | None = None,
    ) -> None:
        self.meta = meta = load_meta(root)
        self.preset, self.seed = preset, seed
        info = meta.root / INFO
        if len(meta.video_keys) < preset.views:
            raise DataError(
                f"{info}: {len(meta.video_keys)} video keys; preset {preset.name} needs {preset.views} views"
            )
        if meta.state_dim > preset.state_dim or meta.action_dim > preset.action_dim:
            raise DataError(
                f"{info}: state/action dims {meta.state_dim}/{meta.action_dim} exceed the preset's "
                f"{preset.state_dim}/{preset.action_dim}"
            )
        self.embodiment_id = meta.embodiment_id if embodiment_id is None else embodiment_id
        if not 0 <= self.embodiment_id < preset.num_embodiments:
            raise DataError(
                f"{info}: embodiment id {self.embodiment_id} is not in [0, {preset.num_embodiments})"
            )
        self.views = meta.video_keys[: preset.views]
        tokenizer = WordTokenizer.load(meta.root / TOKENIZER)
        self.text_ids = {
            i: tokenizer.encode(task, preset.vocab_size) for i, task in meta.tasks.items()
        }
        self.norm_state = Normalizer(meta.state_keys, meta.stats[STATE])
        self.norm_action = Normalizer(meta.action_keys, meta.stats[ACTION])
        self.augment_spec = AugmentSpec(preset.image_size, short_edge_for(preset.image_size))
        self.starts = np.cumsum([0] + [e.length for e in meta.episodes])
        self.readers = ReaderPool(video_backend, meta.fps)
        self._pid: int | None = None
        self._episodes: OrderedDict[int, EpisodeData] = OrderedDict()

    def __len__(self) -> int:
        return int(self.starts[-1])

    def locate(self, index: int) -> tuple[int, int]:
        """(episode, frame) of flat ``index``."""
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} is out of range [0, {len(self)})")
        episode = int(np.searchsorted(self.starts, index, side="right")) - 1
        return episode, index - int(self.starts[episode])

    def __getitem__(self, key: int | tuple[int, int]) -> dict[str, torch.Tensor]:
        draw, index = key if isinstance(key, tuple) else (key, key)
        return self.sample(*self.locate(index), draw=draw)

    def sample(self, episode: int, frame: int, draw: int = 0) -> dict[str, torch.Tensor]:
        data = self.episode(episode)
        frames = self.read_frames(episode, frame)
        images = augment(frames, self.augment_spec, sample_generator(self.seed, draw))
        return {"images": images, **self.text(int(data.task_index[frame])), **self.vectors(data, frame),
                "embodiment_id": torch.tensor(self.embodiment_id, dtype=torch.int64)}  # fmt: skip

    def episode(self, episode: int) -> EpisodeData:
        if self._pid != os.getpid():
            self._pid, self._episodes = os.getpid(), OrderedDict()
        data = self._episodes.get(episode)
        if data is None:
            data = self._episodes[episode] = read_episode(self.meta, episode)
            if len(self._episodes) > _EPISODE_CACHE:
                self._episodes.popitem(last=False)
        return data

    def read_frames(self, episode: int, frame: int) -> torch.Tensor:
        """uint8 [V, 3, H, W]: frame ``frame`` of each view, decoded."""
        length = self.meta.episodes[episode].length
        if not 0 <= frame < length:
            path = self.meta.parquet_path(episode)
            raise DataError(
                f"{path}: frame {frame} is past the end of episode {episode} ({length} frames)"
            )
        frames = [
            self.readers.get(self.meta.video_file(episode, key)).frame(frame) for key in self.views
        ]
        if len({f.shape for f in frames}) > 1:
            shapes = {key: list(f.shape[1:]) for key, f in zip(self.views, frames)}
            raise DataError(
                f"{self.meta.root}: views of episode {episode} differ in size: {shapes}"
            )
        return torch.stack(frames)

    def text(self, task_index: int) -> dict[str, torch.Tensor]:
        ids, n = layout_tokens(self.text_ids[task_index], self.preset)
        mask = torch.zeros(self.preset.seq_len, dtype=torch.bool)
        mask[:n] = True
        return {"input_ids": torch.tensor(ids, dtype=torch.int64), "attention_mask": mask}

    def vectors(self, data: EpisodeData, frame: int) -> dict[str, torch.Tensor]:
        p = self.preset
        state = torch.zeros(1, p.state_dim)
        state[0, : self.meta.state_dim] = torch.from_numpy(self.norm_state(data.state[frame]))
        chunk = self.norm_action(data.action[frame : frame + p.action_horizon])
        action = torch.zeros(p.action_horizon, p.action_dim)
        mask = torch.zeros(p.action_horizon, p.action_dim, dtype=torch.bool)
        action[: len(chunk), : self.meta.action_dim] = torch.from_numpy(chunk)
        mask[: len(chunk), : self.meta.action_dim] = True
        return {"state": state, "action": action, "action_mask": mask}

    def __getstate__(self) -> dict:  # spawn pickles the dataset: no cached episodes
        return {**self.__dict__, "_pid": None, "_episodes": OrderedDict()}
