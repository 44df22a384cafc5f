"""Endless, timed host batches of any ``torch.utils.data`` dataset, with the knobs of DataConfig.

A workload returns a dataset (map-style, with ``__getitem__`` and ``__len__``, or a
``torch.utils.data.IterableDataset``) and autotune builds the loader: the sample order is a seeded
permutation a epoch, sharded by rank (map-style; an iterable dataset shards itself by rank and by
``torch.utils.data.get_worker_info()``), each batch is made and collated in one worker and carries
the seconds that took (``LOAD_KEY``, what the tuner's loader rate is computed from), and the
epochs follow one another for as long as training asks. The last, incomplete batch of an epoch is
dropped, so every step sees the same shapes (CUDA graphs and compiled code need them).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset, Sampler

from autotune.config import DataConfig
from autotune.data.loader import LOAD_KEY, HostLoader
from autotune.data.sampler import mix_seed
from autotune.errors import DataError

Collate = Callable[[list[Any]], dict[str, torch.Tensor]]
_ORDER, _WORKERS = 11, 12  # seed streams


class EpochBatches(Sampler[list[int]]):
    """Index lists of one epoch: a seeded permutation, rank ``r`` of ``W`` taking every ``W``-th index."""

    def __init__(
        self, num_samples: int, batch_size: int, *, seed: int, rank: int, world_size: int
    ) -> None:
        per_rank = num_samples // world_size
        if per_rank < batch_size:
            raise DataError(
                f"dataset: {num_samples} samples make no batch of {batch_size} on each of {world_size} "
                "ranks; make the dataset larger or the batch smaller"
            )
        self.num_samples, self.batch_size, self.seed, self.rank, self.world = (
            num_samples,
            batch_size,
            seed,
            rank,
            world_size,
        )
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return (self.num_samples // self.world) // self.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        g = torch.Generator().manual_seed(mix_seed(self.seed, _ORDER, self.epoch))
        mine = torch.randperm(self.num_samples, generator=g)[self.rank :: self.world].tolist()
        for i in range(len(self)):
            yield mine[i * self.batch_size : (i + 1) * self.batch_size]


def _checked(batch: Any, seconds: float) -> dict[str, torch.Tensor]:
    if not isinstance(batch, dict):
        raise DataError(
            f"dataset: its samples collate to a {type(batch).__name__}; the workload contract wants each "
            "sample a dict of tensors (name -> tensor), e.g. {'pixel_values': x, 'labels': y}"
        )
    batch[LOAD_KEY] = torch.tensor([seconds], dtype=torch.float64)
    return batch


class TimedBatches(torch.utils.data.Dataset):
    """``self[indices]`` is the collated batch of those samples of ``dataset``, timed in its worker."""

    def __init__(self, dataset, collate: Collate) -> None:
        self.dataset, self.collate = dataset, collate

    def __getitem__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        start = time.perf_counter()
        batch = self.collate([self.dataset[i] for i in indices])
        return _checked(batch, time.perf_counter() - start)


class TimedIterable(IterableDataset):
    """Batches of ``batch_size`` consecutive samples of an iterable dataset, each timed in its worker."""

    def __init__(self, dataset: IterableDataset, batch_size: int, collate: Collate) -> None:
        self.dataset, self.batch_size, self.collate = dataset, batch_size, collate

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        samples = iter(self.dataset)
        while True:
            start = time.perf_counter()
            chunk = list(itertools.islice(samples, self.batch_size))
            if len(chunk) < self.batch_size:
                return
            yield _checked(self.collate(chunk), time.perf_counter() - start)


class DatasetLoader:
    """Endless host batches of a dataset: epoch after epoch of a :class:`HostLoader`."""

    def __init__(self, loader: HostLoader, sampler: EpochBatches | None) -> None:
        self.loader, self.sampler = loader, sampler

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for epoch in itertools.count():
            if self.sampler is not None:
                self.sampler.set_epoch(epoch)
            empty = True
            for batch in self.loader:
                empty = False
                yield batch
            if empty:
                raise DataError(
                    f"dataset: epoch {epoch} gave no batch of {self.loader.batch_size or 'the'} samples; an "
                    "iterable dataset must yield at least one batch on each rank (shard it by rank and worker)"
                )


def dataset_loader(
    dataset,
    data_cfg: DataConfig,
    batch_size: int,
    *,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    collate: Collate | None = None,
) -> DatasetLoader:
    """The endless loader of ``dataset`` (see the module docstring), with ``data_cfg``'s loader knobs.

    ``pin_memory`` applies only where CUDA is available; ``prefetch_factor``, ``persistent_workers``
    and ``multiprocessing_context`` only with workers.
    """
    collate = collate or torch.utils.data.default_collate
    sampler = None
    if isinstance(dataset, IterableDataset):
        timed: torch.utils.data.Dataset = TimedIterable(dataset, batch_size, collate)
    elif hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"):
        sampler = EpochBatches(
            len(dataset), batch_size, seed=seed, rank=rank, world_size=world_size
        )
        timed = TimedBatches(dataset, collate)
    else:
        raise DataError(
            f"dataset: a {type(dataset).__name__} is neither a map-style dataset (__getitem__ and __len__) "
            "nor a torch.utils.data.IterableDataset"
        )
    options: dict[str, Any] = {}
    if data_cfg.num_workers:
        options = {
            "prefetch_factor": data_cfg.prefetch_factor,
            "persistent_workers": data_cfg.persistent_workers,
            "multiprocessing_context": data_cfg.multiprocessing_context,
        }
    loader = HostLoader(
        timed,
        batch_size=None,
        sampler=sampler,
        num_workers=data_cfg.num_workers,
        pin_memory=data_cfg.pin_memory and torch.cuda.is_available(),
        generator=torch.Generator().manual_seed(mix_seed(seed, _WORKERS, rank)),
        **options,
    )
    return DatasetLoader(loader, sampler)
