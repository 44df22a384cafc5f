"""``LeRobotDataset``: the frames of a LeRobot dataset on disk (v2.0, v2.1, v3.0), read at a workload's shapes.

A sample is frame ``t`` of episode ``e``: each view's frame decoded from its mp4 (seek to the key
frame, decode forward; in v3.0 the episode's frames are a range of a file that holds many) and
augmented (augment.py), the normalised state at ``t`` and the action
chunk ``t .. t + horizon - 1`` (steps past the episode's end zero and masked), zero-padded to the
widths of the :class:`ReadSpec`, with the frame's task index and the embodiment id. A workload
makes its batch out of these by overriding :meth:`LeRobotDataset.sample` (GR00T N1.6 adds the
task's tokens: ``autotune.workloads.gr00t_n16.data``). Videos and parquet files are opened
lazily in the process that reads them (a DataLoader worker), never shared across ``fork``.

==================  =====================  ========  ==============================================
key                 shape                  dtype     meaning
==================  =====================  ========  ==============================================
``images``          [V, 3, H, W]           uint8     augmented frames of the first V views
``state``           [state_dim]            float32   normalised state, zero-padded
``state_mask``      [state_dim]            bool      True on the dataset's state dims
``action``          [horizon, action_dim]  float32   normalised action chunk, zero-padded
``action_mask``     [horizon, action_dim]  bool      True on real (step, dim) entries
``task_index``      []                     int64     the frame's task (instruction column)
``embodiment_id``   []                     int64     the one passed in, else info.json's, else 0
==================  =====================  ========  ==============================================
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
from autotune.data.meta import INFO, DatasetMeta, load_meta
from autotune.data.sampler import sample_generator
from autotune.data.spec import ReadSpec
from autotune.data.video import ReaderPool
from autotune.errors import DataError

_EPISODE_CACHE = 256


class LeRobotDataset(Dataset):
    """``dataset[(draw, index)]`` (or ``dataset[index]``, draw = index) is one sample's dict.

    ``root`` is the dataset's folder, or its ``DatasetMeta`` already loaded."""

    def __init__(
        self,
        root: str | Path | DatasetMeta,
        spec: ReadSpec,
        *,
        video_backend: str = "pyav",
        seed: int = 0,
        embodiment_id: int | None = None,
    ) -> None:
        self.meta = meta = root if isinstance(root, DatasetMeta) else load_meta(root)
        self.spec, self.seed = spec, seed
        check_fits(meta, spec)
        given = meta.embodiment_id if embodiment_id is None else embodiment_id
        self.embodiment_id = 0 if given is None else given
        self.views = meta.video_keys[: spec.views]
        self.norm_state = Normalizer(meta.state_keys, meta.stats)
        self.norm_action = Normalizer(meta.action_keys, meta.stats)
        self.augment_spec = spec.augment or AugmentSpec(
            spec.image_shape, short_edge_for(min(spec.image_shape))
        )
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
        """Frame ``frame`` of ``episode`` in the keys of the module docstring."""
        data = self.episode(episode)
        images = self.augmented(self.read_frames(episode, frame), draw)
        return {"images": images, **self.vectors(data, frame),
                "task_index": torch.tensor(int(data.task_index[frame]), dtype=torch.int64),
                "embodiment_id": torch.tensor(self.embodiment_id, dtype=torch.int64)}  # fmt: skip

    def augmented(self, frames: list[torch.Tensor], draw: int) -> torch.Tensor:
        """uint8 [V, 3, H, W] at the spec's shape. Views of different sizes are augmented one by
        one from the same draw, so that they get the same crop window and jitter, as upstream."""
        if len({f.shape for f in frames}) == 1:
            return augment(
                torch.stack(frames), self.augment_spec, sample_generator(self.seed, draw)
            )
        return torch.cat(
            [augment(f[None], self.augment_spec, sample_generator(self.seed, draw)) for f in frames]
        )

    def episode(self, episode: int) -> EpisodeData:
        if self._pid != os.getpid():
            self._pid, self._episodes = os.getpid(), OrderedDict()
        data = self._episodes.get(episode)
        if data is None:
            data = self._episodes[episode] = read_episode(self.meta, episode)
            if len(self._episodes) > _EPISODE_CACHE:
                self._episodes.popitem(last=False)
        return data

    def read_frames(self, episode: int, frame: int) -> list[torch.Tensor]:
        """Frame ``frame`` of ``episode`` of each view, decoded: uint8 [3, H, W] each."""
        ep = self.meta.episodes[episode]
        if not 0 <= frame < ep.length:
            raise DataError(
                f"{ep.data_file}: frame {frame} is past the end of episode {episode} ({ep.length} frames)"
            )
        spans = [ep.videos[key] for key in self.views]
        return [self.readers.get(span.path).frame(span.first_frame + frame) for span in spans]

    def vectors(self, data: EpisodeData, frame: int) -> dict[str, torch.Tensor]:
        s = self.spec
        state = torch.zeros(s.state_dim)
        state[: self.meta.state_dim] = torch.from_numpy(self.norm_state(data.state[frame]))
        state_mask = torch.zeros(s.state_dim, dtype=torch.bool)
        state_mask[: self.meta.state_dim] = True
        chunk = self.norm_action(data.action[frame : frame + s.action_horizon])
        action = torch.zeros(s.action_horizon, s.action_dim)
        mask = torch.zeros(s.action_horizon, s.action_dim, dtype=torch.bool)
        action[: len(chunk), : self.meta.action_dim] = torch.from_numpy(chunk)
        mask[: len(chunk), : self.meta.action_dim] = True
        return {"state": state, "state_mask": state_mask, "action": action, "action_mask": mask}

    def __getstate__(self) -> dict:  # spawn pickles the dataset: no cached episodes
        return {**self.__dict__, "_pid": None, "_episodes": OrderedDict()}


def check_fits(meta: DatasetMeta, spec: ReadSpec) -> None:
    """Refuse a dataset with fewer views, or wider state or action vectors, than ``spec`` reads;
    each refusal names the key and what the reader needs."""
    info = meta.root / INFO
    if len(meta.video_keys) < spec.views:
        raise DataError(
            f"{info}: {len(meta.video_keys)} video keys ({', '.join(meta.video_keys)}); {spec.reader} needs {spec.views} views"
        )
    for part, dim, room in (
        ("state", meta.state_dim, spec.state_dim),
        ("action", meta.action_dim, spec.action_dim),
    ):
        if dim > room:
            keys = meta.state_keys if part == "state" else meta.action_keys
            sources = ", ".join(dict.fromkeys(k.source for k in keys))
            raise DataError(
                f"{info}: {part} ({sources}) has {dim} dims; {spec.reader} takes at most {room} (zero-padded to {room})"
            )
