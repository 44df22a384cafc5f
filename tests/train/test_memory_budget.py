"""A memory budget (``--memory-budget``, ``--gpu``): a run over it fails as out of memory with its peak.

On a CPU no allocator can be capped; the run's measured peak (its peak resident set) is checked
against the budget, through the same environment variable a study and ``train`` set.
"""

from __future__ import annotations

import pytest

from autotune.cli import main
from autotune.config import config_from_dict
from autotune.errors import ConfigError
from autotune.train import memcap
from autotune.train.trial.launch import launch

TINY = {"preset": "tiny", "batch_size": 2, "device": "cpu", "data": {"source": "synthetic"}}


def test_a_run_over_the_budget_fails_as_out_of_memory_with_its_peak(tmp_path):
    budget = 50 * 10**6  # below what torch alone takes: every run is over it
    record = launch(
        config_from_dict(TINY),
        steps=2,
        warmup=1,
        timeout=240,
        log_path=tmp_path / "log",
        extra_env={memcap.BUDGET_ENV: str(budget)},
    )
    failure = record.failure
    assert failure is not None and failure.reason == "oom", record
    assert failure.budget_bytes == budget
    assert failure.peak_bytes is not None and failure.peak_bytes > budget
    assert "over the memory budget" in failure.error
    # on a CPU the peak is checked after the run: what it trained is kept, for loss parity
    assert len(failure.losses) == len(failure.grad_norms) == 3


def test_a_run_within_the_budget_is_measured(tmp_path):
    record = launch(
        config_from_dict(TINY),
        steps=2,
        warmup=1,
        timeout=240,
        log_path=tmp_path / "log",
        extra_env={memcap.BUDGET_ENV: str(64 * 2**30)},
    )
    assert record.failure is None, record.failure
    assert record.measurement.memory.allocated_bytes < 64 * 2**30


def test_train_under_a_budget_it_exceeds_exits_with_one_line(capsys, monkeypatch):
    # train sets the variable in this process: set here first, so that the test's end removes it
    monkeypatch.setenv(memcap.BUDGET_ENV, str(2**40))
    code = main(
        [
            "train",
            "--preset",
            "tiny",
            "--synthetic",
            "--steps",
            "1",
            "--warmup",
            "1",
            "--memory-budget",
            "50MB",
            "--batch-size",
            "2",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert len(err) == 1 and "out of memory: peak" in err[0] and "Traceback" not in err[0]


def test_budgets_from_the_command_line():
    assert memcap.budget_of("24GiB", None) == 24 * 2**30
    assert memcap.budget_of(None, "rtx4090") == 24 * 2**30
    assert memcap.budget_of("10GB", "a100-80") == 10 * 10**9  # the explicit size wins
    assert memcap.budget_of(None, None) is None
    with pytest.raises(ConfigError, match=r"--gpu: 'h900' is not a known card; allowed: \["):
        memcap.budget_of(None, "h900")
    with pytest.raises(ConfigError, match="--memory-budget: 'lots' is not a size"):
        memcap.budget_of("lots", None)


@pytest.mark.parametrize(
    ("size", "gpu", "match"),
    [
        ("", None, r"--memory-budget: '' is not a size"),
        ("", "rtx4090", r"--memory-budget: '' is not a size"),
        ("40GiB", "h900", r"--gpu: 'h900' is not a known card"),
    ],
)
def test_a_budget_flag_given_is_never_ignored(size, gpu, match):
    """An empty size (``--memory-budget "$UNSET"``) is no size, and an unknown card is refused even
    where an explicit size wins over it: neither runs the job under another budget than asked."""
    with pytest.raises(ConfigError, match=match):
        memcap.budget_of(size, gpu)


def test_the_peak_check():
    memcap.check_peak(10, 10)
    memcap.check_peak(10**12, None)
    with pytest.raises(memcap.OverBudget) as err:
        memcap.check_peak(3 * 2**30, 2 * 2**30)
    assert err.value.reason == "oom" and err.value.peak_bytes == 3 * 2**30
    assert str(err.value) == "out of memory: peak 3.00 GiB over the memory budget 2.00 GiB"
