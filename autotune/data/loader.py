"""``build_host_loader``: a DataLoader over a LeRobot dataset, with the knobs of DataConfig."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from autotune.childsignals import quiet_while_stopping, stops_held
from autotune.config import DataConfig
from autotune.data.cache import cached_dataset, spec_for
from autotune.data.sampler import ShardedInfiniteSampler
from autotune.data.spec import ReadSpec
from autotune.errors import DataError

_WORKER_PREFIX = "Caught DataError in DataLoader worker"
DEFAULT_EPISODES = 8
"""Episodes of the dataset made in the cache when ``data.episodes`` is null."""
LOAD_KEY = "load_s"
"""Key of the seconds each sample took to make (read, decode, augment) in its worker; collated to
one value per sample, popped by the training session before the batch reaches the model."""


class TimedDataset(torch.utils.data.Dataset):
    """``dataset`` whose samples carry the seconds they took to make (``LOAD_KEY``).

    A worker makes a batch's samples one after another, so their sum is the batch's cost: with
    ``W`` workers the loader sustains at most ``W x batch / cost`` samples/s, whatever a short
    window fed from its prefetch buffer shows.
    """

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name: str):  # the wrapped dataset's attributes (meta, spec, ...)
        if name == "dataset":  # not yet set (unpickling in a spawned worker)
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __getitem__(self, key):
        start = time.perf_counter()
        sample = self.dataset[key]
        sample[LOAD_KEY] = torch.tensor(time.perf_counter() - start, dtype=torch.float64)
        return sample


class HostLoader(DataLoader):
    """A DataLoader whose worker errors re-raise as a one-line :class:`DataError`.

    torch re-raises a worker's exception with the worker's whole traceback as its message; the
    CLI prints errors on one line, so only the original message (which names the file) is kept.
    The workers are stopped before the error propagates: left to the garbage collector (the
    error's traceback keeps the iterator in a reference cycle), their queues are finalised first
    and each worker then waits out torch's 5 s join timeout. A stop signal waits until the
    workers are started.
    """

    def _get_iterator(self):
        """torch's iterator, its workers started with the stop signals held (a stop inside its
        ``__init__`` leaves half an iterator, whose ``__del__`` fails: :func:`stops_held`), and
        its workers' ends quiet while a stop begins (:func:`quiet_while_stopping`)."""
        with stops_held():
            it = super()._get_iterator()
            quiet_while_stopping()
            return it

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        it = super().__iter__()
        while True:
            try:
                batch = next(it)
            except StopIteration:
                return
            except DataError as exc:
                self._stop(it)
                raise DataError(worker_message(str(exc))) from None
            yield batch

    def _stop(self, it: Iterator) -> None:
        shutdown = getattr(
            it, "_shutdown_workers", None
        )  # only multi-process iterators have workers
        if shutdown is not None:
            shutdown()
        if (
            getattr(self, "_iterator", None) is it
        ):  # persistent workers: the next iter() starts afresh
            self._iterator = None


def worker_message(message: str) -> str:
    """``path: problem (in DataLoader worker process N)`` out of torch's re-raised message."""
    marker = f"\n{DataError.__module__}.{DataError.__qualname__}: "
    if not message.startswith(_WORKER_PREFIX) or marker not in message:
        return message
    where = message.split("\n", 1)[0].removeprefix("Caught DataError ").rstrip(".")
    return f"{message.rsplit(marker, 1)[1].strip()} ({where})"


def dataset_root(data_cfg: DataConfig, read: ReadSpec) -> Path:
    """The folder of ``data.dataset``; null: a dataset of ``data.episodes`` episodes that ``read``
    takes, made once in the cache."""
    if data_cfg.source not in (None, "lerobot"):
        raise DataError(
            f"data.source is {data_cfg.source!r}: a dataset folder is read only for the 'lerobot' source"
        )
    if data_cfg.dataset:
        return Path(data_cfg.dataset)
    return cached_dataset(spec_for(read, data_cfg.episodes or DEFAULT_EPISODES))


def build_host_loader(
    dataset: torch.utils.data.Dataset,
    data_cfg: DataConfig,
    batch_size: int,
    *,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
) -> HostLoader:
    """Endless host batches of ``dataset`` (keyed by ``(draw, index)``, as :class:`LeRobotDataset`
    is), sample order seeded and sharded by rank, each sample timed (``LOAD_KEY``).

    ``pin_memory`` applies only where CUDA is available and ``persistent_workers``,
    ``prefetch_factor`` and ``multiprocessing_context`` only with workers.
    """
    sampler = ShardedInfiniteSampler(len(dataset), seed=seed, rank=rank, world_size=world_size)
    workers = data_cfg.num_workers
    options = {}
    if workers:
        options = {
            "prefetch_factor": data_cfg.prefetch_factor,
            "persistent_workers": data_cfg.persistent_workers,
            "multiprocessing_context": data_cfg.multiprocessing_context,
        }
    return HostLoader(
        TimedDataset(dataset),
        batch_size=batch_size,
        sampler=sampler,
        num_workers=workers,
        pin_memory=data_cfg.pin_memory and torch.cuda.is_available(),
        drop_last=True,
        **options,
    )
