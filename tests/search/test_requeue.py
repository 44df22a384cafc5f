"""Trials lost by the machinery are queued again; a configuration interrupted too often is not,
except the stock trial: a study never goes on without its baseline."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from autotune.search.journal import open_journal
from autotune.search.recovery import MAX_INTERRUPTIONS, interruptions, requeue
from autotune.search.trials import STOCK, store
from autotune.train.trial.record import INTERRUPTED, TrialRecord


def lose_repeatedly(tmp_path, attrs: dict) -> tuple[optuna.Study, list[int | None]]:
    study = optuna.create_study(
        storage=open_journal(tmp_path / "study.journal"), direction="maximize"
    )
    study.enqueue_trial({"x": 1}, user_attrs=attrs)
    numbers = []
    for _ in range(MAX_INTERRUPTIONS + 1):
        if not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            break
        trial = study.ask()
        trial.suggest_int("x", 0, 2)
        store(trial, TrialRecord.failed(INTERRUPTED, "the warm parent died"))
        study.tell(trial, state=TrialState.FAIL)
        numbers.append(requeue(study, study.trials[trial.number]))
    return study, numbers


def test_a_configuration_interrupted_too_often_is_dropped(tmp_path):
    study, numbers = lose_repeatedly(tmp_path, {})
    assert numbers == [1, 2, None]
    assert interruptions(study, study.trials[2]) == MAX_INTERRUPTIONS


def test_the_stock_trial_is_always_queued_again(tmp_path):
    study, numbers = lose_repeatedly(tmp_path, {STOCK: True})
    assert numbers == [1, 2, 3, 4]
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert [t.user_attrs.get(STOCK) for t in waiting] == [True]


def test_a_stock_trial_stopped_while_its_parameters_were_drawn_is_queued_whole(tmp_path):
    """A signal (or kill -9) between the first and the last ``suggest``: the trial holds one of
    stock's parameters; queued again, it is stock's whole configuration, not one the sampler draws."""
    study = optuna.create_study(
        storage=open_journal(tmp_path / "study.journal"), direction="maximize"
    )
    stock = {"x": 1, "y": 700}
    study.enqueue_trial(stock, user_attrs={STOCK: True})
    trial = study.ask()
    trial.suggest_int("x", 0, 2)
    store(trial, TrialRecord.failed(INTERRUPTED, "the tuner was stopped by SIGINT"))
    study.tell(trial, state=TrialState.FAIL)
    assert study.trials[0].params == {"x": 1}
    requeue(study, study.trials[0])
    again = study.ask()
    assert {"x": again.suggest_int("x", 0, 2), "y": again.suggest_int("y", 0, 1000)} == stock
    assert again.user_attrs[STOCK]
