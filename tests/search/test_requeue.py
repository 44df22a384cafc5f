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
