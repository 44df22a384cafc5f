"""build_loader: batches, determinism across worker counts, sharding, worker errors, the cache."""

from __future__ import annotations

import multiprocessing
import threading

import pytest
import torch

from autotune.config import DataConfig
from autotune.data import ShardedInfiniteSampler
from autotune.data.loader import LOAD_KEY, worker_message
from autotune.errors import DataError
from autotune.workloads import get_workload
from autotune.workloads.gr00t_common.batch import BATCH_KEYS
from autotune.workloads.gr00t_n16.data import build_loader
from autotune.workloads.gr00t_n16.presets import get_preset

TINY = get_preset("tiny")


def batches(root, n=2, *, workers=0, seed=0, rank=0, world_size=1, batch_size=4, **cfg):
    data = DataConfig(dataset=str(root), num_workers=workers, **cfg)
    it = iter(build_loader(TINY, data, batch_size, seed=seed, rank=rank, world_size=world_size))
    return [next(it) for _ in range(n)]


def test_batches_have_the_workload_format(tiny_dataset):
    (batch,) = batches(tiny_dataset, 1)
    ref = get_workload("gr00t_n16").synthetic_batch(
        "tiny", 4, "cpu", torch.Generator().manual_seed(0)
    )
    # plus the seconds each sample took in its worker, which the training session takes out
    assert tuple(batch) == (*BATCH_KEYS, LOAD_KEY)
    load = batch.pop(LOAD_KEY)
    assert load.shape == (4,) and load.dtype == torch.float64 and bool((load > 0).all())
    assert {k: (v.shape, v.dtype) for k, v in batch.items()} == {
        k: (v.shape, v.dtype) for k, v in ref.items()
    }


def test_same_seed_same_batches_with_0_and_2_workers(tiny_dataset):
    main = batches(tiny_dataset, 3, seed=7)
    workers = batches(
        tiny_dataset, 3, seed=7, workers=2, prefetch_factor=1, persistent_workers=False
    )
    for a, b in zip(main, workers):
        assert all(torch.equal(a[k], b[k]) for k in BATCH_KEYS)
    other = batches(tiny_dataset, 1, seed=8)[0]
    assert not torch.equal(main[0]["images"], other["images"])


def test_workload_make_loader_reads_the_dataset(tiny_dataset):
    data = DataConfig(dataset=str(tiny_dataset), num_workers=0)
    loader = get_workload("gr00t_n16").make_loader("tiny", data, 2, seed=0)
    assert next(iter(loader))["images"].shape == (2, 2, 3, 56, 56)


def test_sampler_shards_draws_and_runs_past_an_epoch():
    ranks = [ShardedInfiniteSampler(10, seed=3, rank=r, world_size=3) for r in range(3)]
    streams = [[key for key, _ in zip(s, range(10))] for s in ranks]
    draws = sorted(d for stream in streams for d, _ in stream)
    assert draws == list(range(30))  # every draw exactly once, across three epochs
    first_epoch = sorted(i for stream in streams for d, i in stream if d < 10)
    assert first_epoch == list(range(10))  # one epoch is a permutation
    again = [
        key for key, _ in zip(ShardedInfiniteSampler(10, seed=3, rank=1, world_size=3), range(10))
    ]
    assert again == streams[1]


def test_worker_error_names_the_file(broken_copy):
    mp4 = broken_copy / "videos/chunk-000/observation.images.front/episode_000000.mp4"
    mp4.write_bytes(mp4.read_bytes()[:500])
    before = set(multiprocessing.active_children())
    # 45 batches of 4 cover the 180 frames: episode 0 is read in any order.
    with pytest.raises(
        DataError,
        match=r"episode_000000\.mp4: cannot open the video .*\(in DataLoader worker process \d\)$",
    ):
        batches(broken_copy, 45, workers=2)
    assert (
        set(multiprocessing.active_children()) <= before
    )  # the workers are stopped, not left to the GC


def test_worker_message_keeps_only_the_original():
    raw = (
        "Caught DataError in DataLoader worker process 1.\nOriginal Traceback (most recent call last):\n"
        '  File "x.py", line 1, in f\nautotune.errors.DataError: ds/a.mp4: cannot open the video (InvalidDataError: bad)\n'
    )
    assert (
        worker_message(raw)
        == "ds/a.mp4: cannot open the video (InvalidDataError: bad) (in DataLoader worker process 1)"
    )
    assert worker_message("ds/a.mp4: missing") == "ds/a.mp4: missing"


def test_null_dataset_is_made_once_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    data = DataConfig(dataset=None, episodes=2, num_workers=0)
    loaders = [None, None]

    def build(i):
        loaders[i] = build_loader(TINY, data, 2, seed=i)

    threads = [threading.Thread(target=build, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    made = list((tmp_path / "datasets").iterdir())
    assert [p.name for p in made if not p.name.startswith(".")] == [
        "lerobot-v2.1-h264-panda-e2-v2-s64-seed0"
    ]
    assert (
        loaders[0].dataset.meta.root
        == loaders[1].dataset.meta.root
        == made[0].parent / "lerobot-v2.1-h264-panda-e2-v2-s64-seed0"
    )
    assert next(iter(loaders[0]))["images"].shape == (2, 2, 3, 56, 56)


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_workers_started_afresh_make_the_same_timed_batches(tiny_dataset, context):
    """spawn and forkserver workers unpickle the (timed) dataset: same batches as fork, each timed."""
    fork = batches(tiny_dataset, 2, seed=3, workers=1, prefetch_factor=1, persistent_workers=False)
    fresh = batches(
        tiny_dataset,
        2,
        seed=3,
        workers=1,
        prefetch_factor=1,
        persistent_workers=False,
        multiprocessing_context=context,
    )
    for a, b in zip(fork, fresh):
        assert all(torch.equal(a[k], b[k]) for k in BATCH_KEYS) and bool((b[LOAD_KEY] > 0).all())
