"""The peak model: static bytes from the meta device against a real built model, and predictions from
measured records (a line in micro-batch per family, the study's base, lower bounds, no prediction
without a comparable trial)."""

from __future__ import annotations

import optuna
import pytest
import torch
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from autotune.config import config_from_dict
from autotune.config._strict import to_dict
from autotune.search.predict import (
    MARGIN,
    accuracy,
    family,
    predicted_of,
    too_large,
)
from autotune.search.static_bytes import static_bytes
from autotune.search.trials import PREDICTED, PREDICTED_OOM, attrs_of
from autotune.train import knobs, precision
from autotune.train.optim.master import bf16_with_masters
from autotune.train.trial.record import TrialRecord
from autotune.workloads import get_workload
from tests.records import measured

MiB = 2**20
BATCH = 8
DISTS = {
    "memory.accumulation_steps": CategoricalDistribution([1, 2, 4, 8]),
    "checkpointing.regions": CategoricalDistribution(["none", "dit"]),
    "optimizer.impl": CategoricalDistribution(["foreach", "master"]),
}


def cfg(steps: int = 1, regions: str = "none", impl: str = "foreach", **over):
    return config_from_dict(
        {
            "preset": "tiny",
            "batch_size": BATCH,
            "device": "cpu",
            "data": {"source": "synthetic"},
            "memory": {"accumulation_steps": steps},
            "checkpointing": {"regions": [] if regions == "none" else regions.split("+")},
            "optimizer": {"impl": impl},
            **over,
        }
    )


def config_of(trial):
    p = trial.params
    return cfg(p["memory.accumulation_steps"], p["checkpointing.regions"], p["optimizer.impl"])


def add(study, steps, peak, regions="none", impl="foreach", record=None, **attrs):
    params = {
        "memory.accumulation_steps": steps,
        "checkpointing.regions": regions,
        "optimizer.impl": impl,
    }
    record = record or measured(peak=peak)
    study.add_trial(
        create_trial(
            params=params,
            distributions=DISTS,
            value=1.0,
            user_attrs={**attrs_of(record), **attrs},
        )
    )
    return study.trials[-1]


def real_bytes(c) -> int:
    """Weights, gradients and optimizer state of the model the session builds, on the CPU: torch's
    AdamW's state after a step; ``master``'s fp32 moments and masters."""
    workload = get_workload(c.workload)
    model = workload.build_model(c.preset, "cpu")
    regions = workload.regions(model)
    knobs.apply_trainability(regions, c)
    precision.set_param_dtypes(regions, c.precision)
    params = [p for p in model.parameters() if p.requires_grad]
    if c.optimizer.impl == "master":
        masters = bf16_with_masters(precision.autocast_only_params(regions, c.precision))
        state = 8 * sum(p.numel() for p in params) + 4 * sum(m.numel() for m in masters.values())
    else:
        for p in params:
            p.grad = torch.zeros_like(p)
        opt = torch.optim.AdamW(params, foreach=True)
        opt.step()
        state = sum(
            t.numel() * t.element_size()
            for s in opt.state.values()
            for k, t in s.items()
            if k != "step"
        )
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.numel() * p.element_size() for p in params)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return weights + grads + state + buffers


@pytest.mark.parametrize(
    "over",
    [
        {},
        {"precision": {"frozen_dtype": "fp32"}},
        {"precision": {"trainable_dtype": "bf16"}},
        {"precision": {"default": "fp32"}},
        {"precision": {"regions": {"dit": "fp32"}}},
        {"model": {"unfreeze": ["vision"]}},
    ],
)
@pytest.mark.parametrize("impl", ["foreach", "master"])
def test_static_bytes_are_those_of_the_model_the_session_builds(over, impl):
    c = cfg(impl=impl, **over)
    assert static_bytes(c) == real_bytes(c)


def test_a_family_ignores_what_the_static_count_models():
    assert family(cfg(1)) == family(cfg(4)) == family(cfg(2, impl="master"))
    assert family(cfg(1)) == family(cfg(1, precision={"frozen_dtype": "fp32"}))
    assert family(cfg(1)) != family(cfg(1, regions="dit"))
    assert family(cfg(1)) != family(cfg(1, precision={"default": "fp32"}))


def test_a_line_in_micro_batch_through_a_family_and_the_study_base_for_another():
    study = optuna.create_study(direction="maximize")
    static = static_bytes(cfg())
    # rest = 400 MiB + 50 MiB a sample: micro-batches of 8 and 4
    add(study, 1, static + 800 * MiB)
    add(study, 2, static + 600 * MiB)
    pred = predicted_of(cfg(4), study, config_of)  # micro-batch 2: on the line
    assert pred.peak_bytes == pytest.approx(static + 500 * MiB, abs=1)
    assert not pred.at_least and pred.static_bytes == static
    assert predicted_of(cfg(2, impl="master"), study, config_of).peak_bytes == pytest.approx(
        static_bytes(cfg(2, impl="master")) + 600 * MiB, abs=1
    )  # the static part is counted per configuration, the rest learnt
    alone = predicted_of(cfg(1, "dit"), study, config_of)  # nothing comparable measured
    assert alone.at_least and alone.peak_bytes == static_bytes(cfg(1, "dit"))
    add(study, 1, static + 600 * MiB, regions="dit")  # checkpointing: 25 MiB a sample over the base
    pred = predicted_of(cfg(2, "dit"), study, config_of)
    assert pred.peak_bytes == pytest.approx(static + 500 * MiB, abs=1)
    assert "base" in pred.basis


def test_without_a_line_only_a_lower_bound_from_a_smaller_micro_batch():
    study = optuna.create_study(direction="maximize")
    static = static_bytes(cfg())
    add(study, 2, static + 600 * MiB)  # micro-batch 4
    smaller = predicted_of(cfg(4), study, config_of)  # a smaller micro-batch: its static bytes only
    assert smaller.at_least and smaller.peak_bytes == static
    same = predicted_of(cfg(2), study, config_of)
    assert same.peak_bytes == static + 600 * MiB and not same.at_least
    larger = predicted_of(cfg(1), study, config_of)  # 8 samples hold at least what 4 held
    assert larger.at_least and larger.peak_bytes == static + 600 * MiB


def test_a_peak_where_cuda_refused_an_allocation_is_a_lower_bound_only():
    study = optuna.create_study(direction="maximize")
    static = static_bytes(cfg())
    budget = 700 * MiB
    refused = TrialRecord.failed("oom", "out of memory", peak_bytes=650 * MiB, budget_bytes=budget)
    add(study, 1, None, record=refused)  # stock at 8 samples, stopped before its peak
    add(study, 2, static + 600 * MiB)
    # no line through a censored point: 2 samples a micro-batch have no estimate
    assert predicted_of(cfg(4), study, config_of).peak_bytes == static
    over = TrialRecord.failed(
        "oom", "out of memory", peak_bytes=static + 900 * MiB, budget_bytes=budget
    )
    add(study, 1, None, record=over)  # measured to its end (the CPU's check) over the budget
    pred = predicted_of(cfg(4), study, config_of)
    assert pred.peak_bytes == pytest.approx(static + 450 * MiB, abs=1) and not pred.at_least


def test_skip_only_beyond_the_margin():
    study = optuna.create_study(direction="maximize")
    static = static_bytes(cfg())
    add(study, 1, static + 800 * MiB)
    pred = predicted_of(cfg(1), study, config_of)
    budget = int(pred.peak_bytes / MARGIN) + 1
    assert too_large(pred, budget) is None
    why = too_large(pred, int(pred.peak_bytes / MARGIN) - MiB)
    assert why.startswith("not run: predicted peak ") and "over 1.05 x the memory budget" in why
    assert too_large(None, 1) is None


def test_a_refusal_before_the_state_was_held_bounds_the_peak_by_the_static_bytes():
    """CUDA refused an allocation below the static bytes (stock's fp32 AdamW state over a 24 GiB
    card): the rungs that hold as much state are over the budget whatever their batch."""
    study = optuna.create_study(direction="maximize")
    static = static_bytes(cfg())
    budget = static - 200 * MiB
    refused = TrialRecord.failed(
        "oom", "out of memory", peak_bytes=budget - MiB, budget_bytes=budget
    )
    add(study, 1, None, record=refused)
    for accumulation in (1, 4):
        pred = predicted_of(cfg(accumulation), study, config_of)
        assert pred.at_least and pred.peak_bytes == static
    assert too_large(predicted_of(cfg(4), study, config_of), int(static / MARGIN) - MiB)


def test_accuracy_pairs_predicted_and_measured_peaks():
    study = optuna.create_study(direction="maximize")
    add(study, 1, 1000 * MiB, **{PREDICTED: {"peak_bytes": 1100 * MiB, "at_least": False}})
    add(study, 2, 800 * MiB, **{PREDICTED: {"peak_bytes": 760 * MiB, "at_least": False}})
    add(study, 4, 700 * MiB)  # no prediction: not counted
    skip = TrialRecord.failed(PREDICTED_OOM, "not run", peak_bytes=2**31, budget_bytes=2**30)
    add(study, 8, None, record=skip, **{PREDICTED: {"peak_bytes": 2**31, "at_least": False}})
    # a lower bound (static bytes only): listed, whether it held, but no error figure
    add(study, 2, 900 * MiB, **{PREDICTED: {"peak_bytes": 450 * MiB, "at_least": True}})
    acc = accuracy(study)
    assert [(r["trial"], r["at_least"]) for r in acc["trials"]] == [
        (0, False),
        (1, False),
        (4, True),
    ]
    assert acc["trials"][0]["error"] == pytest.approx(0.1)
    assert acc["median_abs_error"] == pytest.approx(0.075)
    assert acc["max_abs_error"] == pytest.approx(0.1)
    assert acc["skipped"] == [
        {"trial": 3, "peak_bytes": 2**31, "at_least": False, "budget_bytes": 2**30}
    ]


def test_state_held_on_the_host_or_in_low_bits_counts_as_the_optimizer_says():
    base = cfg()
    trainable = sum(
        p.numel()
        for p in get_workload(base.workload).build_model("tiny", "meta").parameters()
        if p.requires_grad
    )
    offload = config_from_dict({**to_dict(base), "optimizer": {"impl": "fused", "offload": True}})
    assert static_bytes(base) - static_bytes(offload) == 8 * trainable  # no moments on the device
    low = config_from_dict({**to_dict(base), "optimizer": {"impl": "adamw8bit"}})
    per = low.optimizer.state_bytes_per_param(4)
    assert static_bytes(base) - static_bytes(low) == pytest.approx((8 - per) * trainable, abs=8)
