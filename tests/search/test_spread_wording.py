"""A spread is shown only where there is one: a confirmation of one round and a trial of one
measured step say so instead of printing "±0 %"."""

from __future__ import annotations

import dataclasses

import optuna
import pytest

from autotune.search.confirm import Confirmation, Run
from autotune.search.progress import _noise_note
from autotune.search.trials import store
from tests.records import measured


def _confirmation(rounds: int) -> Confirmation:
    runs = [Run(r, t, 10.0 + r + t) for r in range(rounds) for t in (0, 3)]
    return Confirmation(
        stock_trial=0, trial=3, samples_per_s=13.0, stock_samples_per_s=10.0, speedup=1.3,
        study_speedup=1.25, rounds=rounds, spread={"0": 0.1, "3": 0.06} if rounds > 1 else {"0": 0.0, "3": 0.0},
        runs=runs,
    )  # fmt: skip


def test_a_confirmation_of_one_round_says_it_has_no_spread():
    line = _confirmation(1).line()
    assert line.startswith("confirmed in 1 round: #3 13.00 samples/s (1 round, no spread), stock 10.00 "
                           "(1 round, no spread): 1.30x stock")  # fmt: skip
    assert "±" not in line


def test_a_confirmation_of_two_rounds_shows_half_its_range():
    assert (
        _confirmation(2)
        .line()
        .startswith(
            "confirmed in 2 rounds: #3 13.00 samples/s (±3 %), stock 10.00 (±5 %): 1.30x stock"
        )
    )


@pytest.mark.parametrize("steps, note", [(1, " 1 step, no spread"), (3, " ±10 %")])
def test_a_trial_of_one_measured_step_says_it_has_no_spread(steps, note):
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    record = measured(12.0)
    record = dataclasses.replace(
        record, measurement=dataclasses.replace(record.measurement, steps=steps)
    )
    store(trial, record)
    study.tell(trial, 12.0)
    assert _noise_note(study.trials[0]).startswith(note)


def test_a_confirmation_that_keeps_one_of_several_rounds_says_it_has_no_spread():
    """Four rounds run, three of them on a disturbed host: the one kept has no spread to show."""
    from autotune.search.confirm import _summary

    study = optuna.create_study(direction="maximize")
    for rate in (10.0, 13.0):
        trial = study.ask()
        store(trial, measured(rate, step_time=dataclasses.replace(
            measured(rate).measurement.step_time, p10_ms=190.0, p90_ms=210.0)))  # fmt: skip
        study.tell(trial, rate)
    stock, best = study.trials
    runs = [
        Run(r, t, rate, step_time_spread=spread)
        for r, spread in ((1, 0.9), (2, 0.9), (3, 0.9), (4, 0.05))
        for t, rate in ((0, 10.0 + r), (1, 13.0 + r))
    ]
    line = _summary(stock, [best], runs, 1.3, "").line()
    assert "round(s) 4 kept" in line and "1 round, no spread" in line and "±" not in line


def test_a_failed_trials_line_keeps_what_is_wrong_after_a_long_path():
    """A data error begins with the file it names: the line keeps its end, which says what is wrong."""
    import time

    from autotune.search.progress import progress_line
    from autotune.train.trial.record import TrialRecord

    path = "/home/someone/datasets/" + "a-long-folder-name/" * 6 + "episode_000001.mp4"
    error = (
        f"{path}: cannot be decoded (InvalidDataError: Invalid data found when processing input)"
    )
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    store(trial, TrialRecord.failed("data", error))
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    line = progress_line(study, study.trials[0], 1, 3, time.monotonic(), 1, 2)
    assert "failed (data): /home/someone/datasets/" in line
    assert "Invalid data found when processing input" in line and "..." in line
