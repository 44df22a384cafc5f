"""The workload contract: loaders autotune builds from any dataset, finite loaders as epochs, and one
line naming the method and the rule for a workload that breaks it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from autotune.config import DataConfig, config_from_dict
from autotune.data.loader import LOAD_KEY
from autotune.data.torch_loader import dataset_loader
from autotune.errors import DataError, WorkloadError
from autotune.train.session import Session
from autotune.workloads import contract
from tests.workloads.userjob import Rows, Stream, UserJob


def take(loader, n):
    it = iter(loader)
    return [next(it) for _ in range(n)]


@pytest.mark.parametrize("workers", [0, 2])
def test_map_style_dataset_is_shuffled_sharded_timed_and_endless(workers):
    data = DataConfig(num_workers=workers, pin_memory=False)
    rank0 = take(
        dataset_loader(Rows(24), data, 4, seed=1, rank=0, world_size=2), 6
    )  # 2 epochs of 3 batches
    rank1 = take(dataset_loader(Rows(24), data, 4, seed=1, rank=1, world_size=2), 3)
    seen0 = [int(v) for b in rank0[:3] for v in b["x"][:, 0]]
    seen1 = [int(v) for b in rank1 for v in b["x"][:, 0]]
    assert sorted(seen0 + seen1) == list(
        range(24)
    )  # one epoch: the ranks share out every sample once
    assert seen0 != sorted(seen0)  # shuffled
    assert [
        int(v) for b in rank0[3:] for v in b["x"][:, 0]
    ] != seen0  # the next epoch is another order
    assert all(
        b[LOAD_KEY].shape == (1,) and float(b[LOAD_KEY]) > 0 for b in rank0
    )  # timed in the worker
    again = take(dataset_loader(Rows(24), data, 4, seed=1, rank=0, world_size=2), 3)
    assert all(torch.equal(a["x"], b["x"]) for a, b in zip(again, rank0))  # seeded


def test_iterable_dataset_is_re_iterated_and_drops_the_short_batch():
    batches = take(
        dataset_loader(Stream(10), DataConfig(num_workers=0, pin_memory=False), 4, seed=0), 4
    )
    assert [b["x"].shape[0] for b in batches] == [4, 4, 4, 4]  # 10 rows: 2 full batches an epoch
    assert [int(v) for v in batches[2]["x"][:, 0]] == [0, 1, 2, 3]  # the second epoch


def test_tuple_samples_and_a_small_dataset_are_one_line_errors():
    class Pairs(Rows):
        def __getitem__(self, i):
            return torch.zeros(8), torch.tensor(0)

    with pytest.raises(
        DataError, match=r"collate to a list; the workload contract wants each sample a dict"
    ):
        take(dataset_loader(Pairs(8), DataConfig(num_workers=0), 4, seed=0), 1)
    with pytest.raises(DataError, match="24 samples make no batch of 16 on each of 2 ranks"):
        dataset_loader(Rows(24), DataConfig(num_workers=0), 16, seed=0, world_size=2)


def test_a_finite_make_loader_is_re_iterated_but_a_spent_iterator_is_refused():
    job = UserJob()
    finite = [{"x": torch.zeros(2, 8), "y": torch.zeros(2, dtype=torch.long)}] * 2
    assert len(take(contract.epochs(job, finite), 5)) == 5
    with pytest.raises(
        WorkloadError,
        match=r"make_loader\(\): returned an iterator \(spent after one pass\) that gave no "
        r"batch in epoch 1",
    ):
        take(contract.epochs(job, iter(finite)), 3)
    with pytest.raises(
        WorkloadError, match=r"make_loader\(\): gave a tuple; a batch is a dict of tensors"
    ):
        take(contract.epochs(job, [(torch.zeros(2),)]), 1)


def test_session_trains_the_users_dataset_with_the_loader_knobs(tmp_path):
    from autotune.workloads import register_workload
    from autotune.workloads.stock import stock_config

    register_workload(UserJob(), replace=True)
    cfg = stock_config("userjob")
    assert (
        cfg.data.source == "dataset"
        and cfg.precision.default == "fp32"
        and cfg.optimizer.schedule == "constant"
    )
    cfg.batch_size, cfg.data.num_workers, cfg.checkpointing.regions = 4, 1, ["blocks"]
    s = Session(cfg)
    batches = s.batches(s.workload.make_loader("one", cfg.data, 4, seed=0))
    losses = [
        float(s.step(next(batches))[0]) for _ in range(8)
    ]  # 6 batches an epoch: into the second
    assert all(torch.isfinite(torch.tensor(losses))) and len(s.load_times) == 8


class Broken(UserJob):
    name = "broken"


@pytest.mark.parametrize(
    "method, breaks, message",
    [
        (
            "regions",
            lambda self, m: {"inp": [m.inp], "again": [m.inp]},
            r"workload 'broken': regions\(\): module 'inp' is in regions 'inp' and 'again'; regions are disjoint",
        ),
        (
            "regions",
            lambda self, m: {"all": [m.inp]},
            r"regions\(\): region name 'all' is not allowed",
        ),
        (
            "regions",
            lambda self, m: {"blocks": [m.blocks]},
            r"region 'blocks' holds 'blocks', a ModuleList, which has no forward",
        ),
        (
            "loss",
            lambda self, m, b: m(b["x"]),
            r"loss\(\): returned a tensor of shape \[2, 4\]; it must return the scalar",
        ),
        (
            "build_model",
            lambda self, p, device="cpu": nn.Linear(8, 4, dtype=torch.bfloat16),
            r"build_model\(\): parameter 'weight' is torch.bfloat16; every floating parameter must be fp32",
        ),
    ],
)
def test_a_broken_contract_names_the_method_and_the_rule(monkeypatch, method, breaks, message):
    from autotune.workloads import register_workload

    monkeypatch.setattr(Broken, method, breaks)
    register_workload(Broken(), replace=True)
    cfg = config_from_dict(
        {
            "workload": "broken",
            "preset": "one",
            "batch_size": 2,
            "device": "cpu",
            "precision": {"default": "fp32"},
            "data": {"source": "synthetic"},
        }
    )
    with pytest.raises(WorkloadError, match=message):
        s = Session(cfg)
        s.step(s.workload.synthetic_batch("one", 2, "cpu"))
