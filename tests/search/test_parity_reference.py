"""The loss-parity reference where stock does not fit the memory budget (``autotune.search.vet``).

Stock's own losses first (a CPU's over-budget run keeps them), then stock without the memory cap,
then the first exact configuration that fits; until one exists a trial that changes what is
computed is not the best, and the memory ladder goes on over its exact rungs.
"""

from __future__ import annotations

import time

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from autotune.config import config_from_dict
from autotune.config.compat import Machine
from autotune.report.parts import Parity, trial_row
from autotune.search.guide import Guide
from autotune.search.output import why_no_best
from autotune.search.progress import progress_line
from autotune.search.space import parse_space
from autotune.search.trials import RECHECK_OF, STOCK, UNCAPPED, attrs_of, best_trial
from autotune.search.vet import (
    NO_REFERENCE,
    needs_uncapped,
    parity_reference,
    parity_with_stock,
    rechecks,
)
from autotune.train.trial.record import TrialRecord
from tests.records import measured

GiB = 2**30
BUDGET = 24 * GiB
SPACE = {
    "knobs": {
        "optimizer.impl": {"type": "categorical", "choices": ["foreach", "fused", "adamw8bit"]},
        "optimizer.offload": {"when": {"optimizer.impl": ["fused"]}},
        "memory.expandable_segments": {},
        "memory.accumulation_steps": {"choices": [1, 2]},
    }
}
DISTS = {
    "optimizer.impl": CategoricalDistribution(["foreach", "fused", "adamw8bit"]),
    "optimizer.offload": CategoricalDistribution([False, True]),
    "memory.expandable_segments": CategoricalDistribution([False, True]),
    "memory.accumulation_steps": CategoricalDistribution([1, 2]),
}
STOCK_PARAMS = {
    "optimizer.impl": "foreach",
    "memory.expandable_segments": False,
    "memory.accumulation_steps": 1,
}
LOW_BIT = {**STOCK_PARAMS, "optimizer.impl": "adamw8bit", "memory.expandable_segments": True}
OFFLOAD = {**STOCK_PARAMS, "optimizer.impl": "fused", "optimizer.offload": True}
LOSSES = [2.0, 1.8, 1.7]


def add(study, params, record, *, stock=False, parity=None, **attrs):
    peak = record.measurement.memory.allocated_bytes if record.measurement else 30 * GiB
    extra = attrs_of(record, constraint=(peak - BUDGET) / BUDGET, parity=parity)
    extra.update(attrs)
    if stock:
        extra[STOCK] = True
    value = record.measurement.samples_per_s if record.measurement else 0.0
    dists = {k: DISTS[k] for k in params}
    study.add_trial(create_trial(params=params, distributions=dists, value=value, user_attrs=extra))
    return study.trials[-1]


def oom(losses=None) -> TrialRecord:
    return TrialRecord.failed(
        "oom", "out of memory", peak_bytes=30 * GiB, budget_bytes=BUDGET, losses=losses,
        grad_norms=[1.0] * len(losses) if losses else None,
    )  # fmt: skip


def fits(speed: float, losses=LOSSES) -> TrialRecord:
    return measured(speed, peak=20 * GiB, losses=list(losses), grad_norms=[1.0] * len(losses))


def cfg(impl: str, offload: bool = False):
    return config_from_dict(
        {"preset": "tiny", "batch_size": 2, "optimizer": {"impl": impl, "offload": offload}}
    )


def test_without_a_reference_a_low_bit_fit_is_not_the_best_and_the_ladder_goes_on_exact(tmp_path):
    study = optuna.create_study(direction="maximize")
    add(study, STOCK_PARAMS, oom(), stock=True)  # out of memory on a real card: no losses
    assert parity_reference(study) is None

    parity = parity_with_stock(study, fits(20.0), cfg("adamw8bit"))
    assert parity["passed"] is None and parity["note"] == NO_REFERENCE
    assert parity["numerics"] == {"optimizer.impl": "adamw8bit"}
    assert (
        parity_with_stock(study, fits(5.0), cfg("fused", offload=True)) is None
    )  # exact: may lead
    low = add(study, LOW_BIT, fits(20.0), parity=parity)
    assert best_trial(study) is None  # it fits, but cannot lead
    row = trial_row(low, tmp_path, stock=False, best=False, pareto=False)
    assert row.parity_pending and row.parity_passed is None  # not "parity failed"
    assert f"trials [{low.number}] fit but change what is computed" in why_no_best(study, BUDGET)

    space = parse_space(SPACE, tmp_path / "s.yaml")
    guide = Guide(space, stage_trials=2, stock=cfg("foreach"), memory_budget=BUDGET)
    tried = []
    for _ in range(4):  # the rungs left are the exact ones: no other low-bit rung is spent
        fixed, stage = guide.next_trial(study, None)
        if fixed is None:
            break
        assert stage.kind == "memory" and fixed["optimizer.impl"] != "adamw8bit"
        tried.append(fixed)
        add(study, fixed, oom())
    assert any(f.get("optimizer.offload") for f in tried)


def test_the_first_exact_fit_is_the_reference_and_the_low_bit_fit_is_queued_again(tmp_path):
    study = optuna.create_study(direction="maximize")
    add(study, STOCK_PARAMS, oom(), stock=True)
    low = add(
        study, LOW_BIT, fits(20.0), parity=parity_with_stock(study, fits(20.0), cfg("adamw8bit"))
    )
    off = add(study, OFFLOAD, fits(5.0, [2.2, 2.0, 1.9]))
    ref = parity_reference(study)
    assert (ref.kind, ref.trial, ref.losses) == ("exact", off.number, [2.2, 2.0, 1.9])
    assert "stock does not fit 24 GiB" in ref.text()
    assert best_trial(study).number == off.number

    same = parity_with_stock(study, fits(20.0, [2.2, 2.0, 1.9]), cfg("adamw8bit"))
    assert same["passed"] is True and same["reference"]["trial"] == off.number
    assert "stock_trial" not in same  # compared with the fit, not with stock
    other = parity_with_stock(study, fits(20.0, [4.0, 3.9, 3.8]), cfg("adamw8bit"))
    assert other["passed"] is False

    assert [t.number for t in rechecks(study)] == [low.number]  # faster than the best: again
    add(study, LOW_BIT, fits(19.0, [2.2, 2.0, 1.9]), parity=same, **{RECHECK_OF: low.number})
    assert rechecks(study) == []
    assert best_trial(study).number == len(study.trials) - 1  # the low-bit run, compared, leads


def test_stock_over_the_budget_with_losses_is_the_reference():
    """On a CPU the budget is checked after the run: stock trained to its end and kept its losses."""
    study = optuna.create_study(direction="maximize")
    add(study, STOCK_PARAMS, oom(losses=LOSSES), stock=True)
    add(study, OFFLOAD, fits(5.0, [9.0, 9.0, 9.0]))
    ref = parity_reference(study)
    assert (ref.kind, ref.trial, ref.losses) == ("stock", 0, LOSSES)
    assert ref.text() == "stock (trial #0, trained to its end over 24 GiB)"
    parity = parity_with_stock(study, fits(20.0), cfg("adamw8bit"))
    assert parity["passed"] is True and parity["stock_trial"] == 0


def test_stock_without_the_cap_is_the_reference_where_the_budget_is_emulated():
    study = optuna.create_study(direction="maximize")
    uncapped = {"losses": LOSSES, "grad_norms": [1.0, 1.0, 1.0]}
    add(study, STOCK_PARAMS, oom(), stock=True, **{UNCAPPED: uncapped})
    add(study, OFFLOAD, fits(5.0, [9.0, 9.0, 9.0]))  # an exact fit does not displace it
    ref = parity_reference(study)
    assert (ref.kind, ref.trial) == ("uncapped", 0)
    assert ref.text() == "stock without the memory cap (it does not fit 24 GiB)"
    parity = parity_with_stock(study, fits(20.0), cfg("adamw8bit"))
    assert parity["passed"] is True and parity["stock_trial"] == 0
    notes: list[str] = []
    assert Parity.from_dict(parity, "parity.json", notes).reference == ref.text() and not notes

    h200 = Machine(cuda=True, capability=(9, 0), device_bytes=140 * GiB)
    assert needs_uncapped(oom(), BUDGET, h200)  # a 24 GiB card emulated on a bigger one
    assert not needs_uncapped(oom(), 140 * GiB, h200)  # the card itself: no cap to lift
    assert not needs_uncapped(oom(), None, h200)  # no cap: the budget is a constraint only
    assert not needs_uncapped(oom(losses=LOSSES), BUDGET, h200)  # it has its losses
    assert not needs_uncapped(oom(), BUDGET, Machine(cuda=False))
    assert not needs_uncapped(fits(5.0), BUDGET, h200)


def test_a_trial_judged_on_too_few_steps_is_never_the_best_and_says_so(tmp_path):
    study = optuna.create_study(direction="maximize")
    add(study, STOCK_PARAMS, fits(10.0, [1.0, 1.3, 0.9]), stock=True)
    exact = {**STOCK_PARAMS, "optimizer.impl": "fused"}
    # other draws: the means 7.8 % apart, within the three steps' noise
    parity = parity_with_stock(study, fits(20.0, [1.2, 1.0, 1.25]), cfg("fused"))
    assert parity["passed"] is None and parity["undecided"]
    assert parity["note"].startswith("3 step(s) too few to judge")
    fast = add(study, exact, fits(20.0, [1.2, 1.0, 1.25]), parity=parity)
    assert best_trial(study).number == 0  # faster, but not the best on an undecided parity
    row = trial_row(fast, tmp_path, stock=False, best=False, pareto=False)
    assert row.parity_undecided == parity["note"] and row.parity_passed is None
    assert not row.parity_pending  # it has a reference: not "no reference yet"
    line = progress_line(study, fast, 2, 2, time.monotonic(), 2, 0)
    assert "[loss parity undecided, 3 step(s) too few to judge" in line and "FAILED" not in line

    clear = parity_with_stock(study, fits(20.0, [2.0, 2.6, 1.8]), cfg("fused"))
    assert clear["passed"] is False and "undecided" not in clear  # twice stock's: it fails
