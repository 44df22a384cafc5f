"""The time a budgeted study keeps for confirming its best: none where stock has nothing to confirm
against (it ran out of memory under the budget)."""

from __future__ import annotations

from dataclasses import replace

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from autotune.search.confirm import reserve_s
from autotune.search.trials import STOCK, attrs_of
from autotune.train.trial.record import Cost, TrialRecord
from tests.records import measured


def _costed(rate: float) -> TrialRecord:
    """A measured run that took a minute, ten seconds of it compiling."""
    return replace(measured(rate), cost=Cost(60.0, {"compile": 10.0, "other": 50.0}))


DISTS = {"optimizer.impl": CategoricalDistribution(["foreach", "adamw8bit"])}


def _study(stock: TrialRecord) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for impl, record, is_stock in (("foreach", stock, True), ("adamw8bit", _costed(30.0), False)):
        attrs = attrs_of(record, constraint=-0.1)
        if is_stock:
            attrs[STOCK] = True
        value = record.measurement.samples_per_s if record.measurement else 0.0
        study.add_trial(
            create_trial(
                params={"optimizer.impl": impl},
                distributions=DISTS,
                value=value,
                user_attrs=attrs,
            )
        )
    return study


def test_a_measured_stock_and_best_are_kept_time_to_confirm():
    assert reserve_s(_study(_costed(10.0)), rounds=2) > 0


def test_no_time_is_kept_when_stock_ran_out_of_memory():
    oom = TrialRecord.failed("oom", "out of memory", peak_bytes=25 * 2**30, budget_bytes=24 * 2**30)
    assert reserve_s(_study(oom), rounds=2) == 0.0
