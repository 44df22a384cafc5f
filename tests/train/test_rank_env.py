"""torchrun's variables in the environment autotune starts in: a bad value is one line naming it;
a stale one never reaches a trial of one process."""

from __future__ import annotations

import pytest

from autotune.errors import ConfigError
from autotune.ranks import PLACE, ranks_from_env
from autotune.train.trial.launch import launch
from tests.clirun import autotune, one_line_error
from tests.train.test_train_cpu import tiny


@pytest.mark.parametrize(
    "env, named",
    [
        ({"RANK": "abc"}, "RANK='abc' is not an integer"),
        ({"WORLD_SIZE": "x"}, "WORLD_SIZE='x' is not an integer"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE=0 is out of range"),
        ({"LOCAL_RANK": "-1"}, "LOCAL_RANK=-1 is out of range"),
        (
            {"RANK": "5", "WORLD_SIZE": "2"},
            "RANK=5 is out of range; allowed: an integer from 0 to 1",
        ),
        ({"RANK": "1", "WORLD_SIZE": "2"}, "MASTER_ADDR is not set"),
        ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "MASTER_PORT is not set"),
    ],
)
def test_a_bad_rank_variable_is_named(env, named):
    with pytest.raises(ConfigError, match="environment variable") as err:
        ranks_from_env(env)
    assert named in str(err.value)


def test_torchruns_variables_are_read_as_they_are_set():
    env = {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "h",
        "MASTER_PORT": "9",
    }
    got = ranks_from_env(env)
    assert (got.rank, got.world, got.local) == (3, 4, 1)
    assert (ranks_from_env({}).rank, ranks_from_env({}).world) == (0, 1)


def test_train_with_a_bad_rank_variable_says_so_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "abc")
    proc = autotune("train", "--preset", "tiny", "--synthetic", "--steps", "1", cwd=tmp_path)
    assert proc.returncode == 2
    assert "environment variable RANK='abc' is not an integer" in one_line_error(proc)


def test_a_one_process_trial_ignores_a_stale_process_group_of_the_shell(monkeypatch):
    # a shell left inside another job's torchrun: its rendezvous is not this trial's
    stale = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1"}
    for name, value in {**stale, "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(name, value)
    assert set(stale) <= set(PLACE)
    record = launch(tiny(), steps=2, warmup=1, timeout=120)
    assert record.failure is None, record.failure
    assert record.measurement.samples_per_s > 0
