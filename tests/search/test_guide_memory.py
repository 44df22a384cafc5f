"""Memory as the bottleneck: stock does not fit the budget, the guide lowers its peak, cheapest first."""

from __future__ import annotations

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from autotune.config import config_from_dict
from autotune.search import fit
from autotune.search.guide import Guide
from autotune.search.space import parse_space
from autotune.search.trials import STOCK, attrs_of
from autotune.train.trial.record import TrialRecord
from tests.records import measured

GiB = 2**30
SPACE = {
    "knobs": {
        "optimizer.impl": {
            "type": "categorical",
            "choices": ["foreach", "fused"],
            "remedy": "fused",
        },
        "checkpointing.regions": {
            "type": "categorical",
            "choices": [[], ["dit"], ["llm_trainable", "dit"]],
        },
        "memory.expandable_segments": {},
        "memory.accumulation_steps": {"choices": [1, 2, 4, 8]},
    }
}
DISTS = {
    "optimizer.impl": CategoricalDistribution(["foreach", "fused"]),
    "checkpointing.regions": CategoricalDistribution(["none", "dit", "llm_trainable+dit"]),
    "memory.expandable_segments": CategoricalDistribution([False, True]),
    "memory.accumulation_steps": CategoricalDistribution([1, 2, 4, 8]),
}
STOCK_PARAMS = {
    "optimizer.impl": "foreach",
    "checkpointing.regions": "none",
    "memory.expandable_segments": False,
    "memory.accumulation_steps": 1,
}


def add(study, params, record, constraint, stock=False, dists=DISTS):
    attrs = attrs_of(record, constraint=constraint)
    if stock:
        attrs[STOCK] = True
    value = record.measurement.samples_per_s if record.measurement else 0.0
    study.add_trial(create_trial(params=params, distributions=dists, value=value, user_attrs=attrs))
    return study.trials[-1]


def oom(peak):
    return TrialRecord.failed("oom", "out of memory", peak_bytes=peak, budget_bytes=24 * GiB)


def test_stock_over_the_budget_climbs_the_ladder_until_a_trial_fits(tmp_path):
    space = parse_space(SPACE, tmp_path / "s.yaml")
    base = config_from_dict({"preset": "tiny", "batch_size": 4})
    study = optuna.create_study(direction="maximize")
    add(study, STOCK_PARAMS, oom(30 * GiB), 0.25, stock=True)
    guide = Guide(space, stage_trials=2, stock=base, memory_budget=24 * GiB)

    rungs = fit.ladder(space, STOCK_PARAMS, batch_size=4)
    # cheapest first, cumulative; 8 micro-batches do not divide a batch of 4
    assert [
        (
            r["memory.expandable_segments"],
            r["memory.accumulation_steps"],
            r["checkpointing.regions"],
        )
        for r in rungs
    ] == [
        (True, 1, "none"),
        (True, 2, "none"),
        (True, 1, "llm_trainable+dit"),
        (True, 2, "llm_trainable+dit"),
        (True, 4, "none"),
        (True, 4, "llm_trainable+dit"),
    ]
    fixed, stage = guide.next_trial(study, None)  # no trial fits: no incumbent
    assert stage.kind == "memory" and stage.bottleneck == "memory"
    assert fixed == rungs[0]
    guide.record(study, stage, add(study, fixed, oom(26 * GiB), 26 / 24 - 1))
    fixed, stage = guide.next_trial(study, None)
    assert fixed == rungs[1]  # the next rung, not the same one again
    profile = {"compute_serial": 0.9, "other": 0.1}
    fits = add(study, fixed, measured(8.0, peak=20 * GiB, buckets=profile), 20 / 24 - 1)
    guide.record(study, stage, fits)

    # a trial fits: the usual stages go on from it (a remedy of the optimizer, memory knobs kept)
    fixed, stage = guide.next_trial(study, fits)
    assert stage.kind != "memory" and stage.incumbent == fits.number
    assert stage.groups == ["optimizer"] and fixed["optimizer.impl"] == "fused"
    assert fixed["memory.accumulation_steps"] == 2
    memory = guide.stages[0]
    assert [(m["peak_bytes"], m["fits"]) for m in memory.memory] == [
        (30 * GiB, False),
        (26 * GiB, False),
        (20 * GiB, True),
    ]
    assert all(m["budget_bytes"] == 24 * GiB for m in memory.memory)


def test_stock_that_fits_gets_no_memory_stage(tmp_path):
    space = parse_space(SPACE, tmp_path / "s.yaml")
    study = optuna.create_study(direction="maximize")
    stock = add(study, STOCK_PARAMS, measured(10.0, peak=GiB), -0.5, stock=True)
    guide = Guide(space, stage_trials=2, stock=config_from_dict({"batch_size": 4}))
    _, stage = guide.next_trial(study, stock)
    assert stage.kind != "memory"
    assert guide.next_trial(study, None) == (None, None)  # nothing to fit


def test_the_optimizer_state_tiers_come_after_every_exact_rung_each_from_none(tmp_path):
    """adamw8bit, adamw4bit, then the state on the host (with the fused AdamW it steps): each tier
    climbs the batch rungs again from none, after every rung of fp32 moments."""
    spec = {"knobs": dict(SPACE["knobs"])}
    spec["knobs"]["optimizer.impl"] = {
        "type": "categorical",
        "choices": ["foreach", "fused", "adamw8bit", "adamw4bit"],
        "remedy": "fused",
    }
    spec["knobs"]["optimizer.offload"] = {"when": {"optimizer.impl": ["fused"]}}
    space = parse_space(spec, tmp_path / "s.yaml")
    rungs = fit.ladder(space, {**STOCK_PARAMS, "optimizer.offload": False}, batch_size=2)
    got = [
        (
            r["optimizer.impl"],
            r.get("optimizer.offload"),
            r["memory.accumulation_steps"],
            r["checkpointing.regions"],
        )
        for r in rungs
    ]
    batch = [(1, "none"), (2, "none"), (1, "llm_trainable+dit"), (2, "llm_trainable+dit")]
    # optimizer.offload exists beside the fused AdamW only
    tiers = [("foreach", None), ("adamw8bit", None), ("adamw4bit", None), ("fused", True)]
    assert got == [(impl, off, *b) for impl, off in tiers for b in batch]
    assert all(r["memory.expandable_segments"] for r in rungs)


def test_a_captured_stock_step_gets_low_bit_tiers_but_not_the_hosts_update(tmp_path):
    """Low-bit states run in a captured whole step; the host's update does not."""
    spec = {"knobs": {"graphs.mode": {}, **SPACE["knobs"]}}
    spec["knobs"]["optimizer.impl"] = {
        "type": "categorical",
        "choices": ["foreach", "fused", "adamw8bit"],
    }
    space = parse_space(spec, tmp_path / "s.yaml")
    stock = {**STOCK_PARAMS, "graphs.mode": "step"}
    rungs = fit.ladder(space, stock, batch_size=4)
    assert {r["optimizer.impl"] for r in rungs} == {"foreach", "adamw8bit"}
    assert not any(r.get("optimizer.offload") for r in rungs)


def test_the_stages_after_the_ladder_keep_the_state_tier_that_fitted(tmp_path):
    """fp32 moments (the optimizer's remedy) over the 8-bit ones that made stock fit would not fit."""
    spec = {"knobs": dict(SPACE["knobs"])}
    spec["knobs"]["optimizer.impl"] = {
        "type": "categorical",
        "choices": ["foreach", "fused", "adamw8bit"],
        "remedy": "fused",
    }
    space = parse_space(spec, tmp_path / "s.yaml")
    dists = {**DISTS, "optimizer.impl": CategoricalDistribution(["foreach", "fused", "adamw8bit"])}
    study = optuna.create_study(direction="maximize")

    def put(params, record, constraint, stock=False):
        return add(study, params, record, constraint, stock, dists)

    put(STOCK_PARAMS, oom(30 * GiB), 0.25, stock=True)
    guide = Guide(
        space,
        stage_trials=2,
        stock=config_from_dict({"preset": "tiny", "batch_size": 4}),
        memory_budget=24 * GiB,
    )
    fixed, stage = guide.next_trial(study, None)
    while fixed["optimizer.impl"] != "adamw8bit":
        guide.record(study, stage, put(fixed, oom(26 * GiB), 26 / 24 - 1))
        fixed, stage = guide.next_trial(study, None)
    profile = {"compute_serial": 0.9, "other": 0.1}
    fits = put(fixed, measured(8.0, peak=20 * GiB, buckets=profile), 20 / 24 - 1)
    guide.record(study, stage, fits)
    fixed, stage = guide.next_trial(study, fits)
    # no remedy trial of fp32 moments: the optimizer's group is searched (its sampler may try them;
    # the prediction skips what cannot fit)
    assert stage.kind == "search" and stage.groups == ["optimizer"]


def test_checkpointing_every_other_block_comes_before_every_block(tmp_path):
    spec = {"knobs": dict(SPACE["knobs"])}
    spec["knobs"]["checkpointing.every"] = {
        "type": "categorical",
        "choices": [1, 2, 4],
        "when": {"checkpointing.regions": [["dit"], ["llm_trainable", "dit"]]},
    }
    space = parse_space(spec, tmp_path / "s.yaml")
    rungs = fit.ladder(space, STOCK_PARAMS, batch_size=4)
    got = [
        (r["memory.accumulation_steps"], r["checkpointing.regions"], r.get("checkpointing.every"))
        for r in rungs
    ]
    assert got[:5] == [
        (1, "none", None),
        (2, "none", None),
        (1, "llm_trainable+dit", 2),
        (1, "llm_trainable+dit", None),  # the knob's default: every block
        (2, "llm_trainable+dit", None),
    ]


def test_the_ladder_climbs_to_low_bit_states_when_a_rung_brings_a_knob_into_existence(tmp_path):
    """Checkpointed rungs bring ``checkpointing.every`` into existence: the guide sets it (stock's
    value) rather than leave it to the sampler, so each rung is run once and the climb goes on to
    the 8-bit states. The trials here hold what a sampler would add for a knob left unset."""
    spec = {"knobs": dict(SPACE["knobs"])}
    spec["knobs"]["optimizer.impl"] = {
        "type": "categorical",
        "choices": ["foreach", "fused", "adamw8bit"],
    }
    spec["knobs"]["checkpointing.every"] = {
        "type": "categorical",
        "choices": [1, 2, 4],
        "when": {"checkpointing.regions": [["dit"], ["llm_trainable", "dit"]]},
    }
    space = parse_space(spec, tmp_path / "s.yaml")
    impl = CategoricalDistribution(["foreach", "fused", "adamw8bit"])
    dists = {
        **DISTS,
        "optimizer.impl": impl,
        "checkpointing.every": CategoricalDistribution([1, 2, 4]),
    }
    study = optuna.create_study(direction="maximize")

    def put(params, record, constraint, stock=False):
        return add(study, params, record, constraint, stock, {k: dists[k] for k in params})

    put(STOCK_PARAMS, oom(30 * GiB), 0.25, stock=True)
    guide = Guide(
        space,
        stage_trials=2,
        stock=config_from_dict({"preset": "tiny", "batch_size": 4}),
        memory_budget=24 * GiB,
    )
    seen = []
    fixed, stage = guide.next_trial(study, None)
    for _ in range(len(fit.ladder(space, STOCK_PARAMS, batch_size=4))):
        if fixed["optimizer.impl"] == "adamw8bit":
            break
        assert fixed not in seen
        seen.append(fixed)
        if fixed["checkpointing.regions"] != "none":
            assert fixed["checkpointing.every"] in (1, 2)
        sampled = {"checkpointing.every": 4} if fixed["checkpointing.regions"] != "none" else {}
        guide.record(study, stage, put({**sampled, **fixed}, oom(26 * GiB), 0.1))
        fixed, stage = guide.next_trial(study, None)
    assert fixed["optimizer.impl"] == "adamw8bit" and stage.kind == "memory"
