"""Profile guidance: which group a stage searches, what it fixes, what it records; pruning."""

from __future__ import annotations

import json
from dataclasses import replace

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from autotune.cli import main
from autotune.search.bottleneck import (
    MIN_SHARE,
    buckets_of,
    loader_short,
    loader_stall,
    ranked_buckets,
)
from autotune.search.candidates import untried
from autotune.search.guide import Guide
from autotune.search.space import load_space, parse_space
from autotune.search.stage import FREE, STUDY_ATTR
from autotune.search.trials import RECORD, STOCK, attrs_of, reason_of
from autotune.train.trial.record import LoaderRate
from tests.records import measured

SPACE = {
    "knobs": {
        "data.num_workers": {"type": "int", "low": 0, "high": 2, "group": "data", "remedy": 2},
        "optimizer.impl": {
            "type": "categorical",
            "choices": ["foreach", "fused"],
            "group": "optimizer",
            "remedy": "fused",
        },
        "checkpointing.regions": {
            "type": "categorical",
            "choices": [[], ["dit"]],
            "group": "compile",
        },
    }
}
DISTS = {
    "data.num_workers": IntDistribution(0, 2),
    "optimizer.impl": CategoricalDistribution(["foreach", "fused"]),
    "checkpointing.regions": CategoricalDistribution(["none", "dit"]),
}


def incumbent(study, buckets, params, value=10.0):
    trial = create_trial(
        params=params,
        distributions=DISTS,
        value=value,
        user_attrs=attrs_of(measured(value, buckets=buckets)),
    )
    study.add_trial(trial)
    return study.trials[-1]


def test_remedies_first_then_the_largest_actionable_bucket(tmp_path):
    space = parse_space(SPACE, tmp_path / "s.yaml")
    study = optuna.create_study(direction="maximize")
    stock = incumbent(
        study,
        {
            "data_stall": 0.6,
            "launch_overhead": 0.3,
            "compute_serial": 0.08,
            "comm_wait": 0.0,
            "other": 0.02,
        },
        {"data.num_workers": 0, "optimizer.impl": "foreach", "checkpointing.regions": "none"},
    )
    guide = Guide(space, stage_trials=2, together=False)
    # one remedy trial per actionable bucket, largest first; every other knob at the incumbent's value
    fixed, stage = guide.next_trial(study, stock)
    assert (stage.kind, stage.bottleneck, stage.groups, stage.knobs) == (
        "remedy",
        "data_stall",
        ["data"],
        ["data.num_workers"],
    )
    assert fixed == {
        "data.num_workers": 2,
        "optimizer.impl": "foreach",
        "checkpointing.regions": "none",
    }
    stage.trials.append(1)
    fixed, stage2 = guide.next_trial(
        study, stock
    )  # launch overhead: graphs (absent here), then the optimizer
    assert (stage2.kind, stage2.bottleneck, stage2.groups) == (
        "remedy",
        "launch_overhead",
        ["optimizer"],
    )
    assert fixed == {
        "data.num_workers": 0,
        "optimizer.impl": "fused",
        "checkpointing.regions": "none",
    }
    stage2.trials.append(2)
    # compute_serial (8 %, over the 5 % floor) maps to the optimizer (tried) and compile (no remedy):
    # the searches begin, largest bucket first, the group's knobs left to the sampler
    fixed, stage3 = guide.next_trial(study, stock)
    assert (stage3.kind, stage3.bottleneck, stage3.groups) == ("search", "data_stall", ["data"])
    assert fixed == {"optimizer.impl": "foreach", "checkpointing.regions": "none"}
    stage3.trials.append(
        3
    )  # not measured (no such trial): a search ends at its first trial that gains nothing
    _, stage4 = guide.next_trial(study, stock)
    assert (stage4.bottleneck, stage4.groups) == ("launch_overhead", ["optimizer"])
    stage4.trials += [5, 6]
    # compile's only knob here is checkpointing, which the incumbent does not use: a search may only
    # checkpoint fewer regions, so there is nothing to search; every group searched: the free search
    fixed, stage6 = guide.next_trial(study, stock)
    assert (
        fixed is None
        and stage6.kind == "free"
        and stage6.bottleneck is None
        and stage6.groups == [FREE]
    )
    # the stages are in the study, for a resumed or shared run
    again = Guide(space, stage_trials=2, together=False)
    again.load(study)
    assert [(s.kind, s.groups) for s in again.stages] == [
        ("remedy", ["data"]),
        ("remedy", ["optimizer"]),
        ("search", ["data"]),
        ("search", ["optimizer"]),
        ("free", [FREE]),
    ]


def test_a_remedy_the_incumbent_already_holds_is_not_tried(tmp_path):
    space = parse_space(SPACE, tmp_path / "s.yaml")
    study = optuna.create_study(direction="maximize")
    fused = incumbent(
        study,
        {
            "data_stall": 0.0,
            "launch_overhead": 0.7,
            "compute_serial": 0.3,
            "comm_wait": 0.0,
            "other": 0.0,
        },
        {"data.num_workers": 0, "optimizer.impl": "fused", "checkpointing.regions": "dit"},
    )
    guide = Guide(space, 2)
    _, stage = guide.next_trial(study, fused)
    # launch_overhead's groups are the optimizer's, then compile's: the incumbent holds the optimizer
    # group at its remedy throughout (fused), and a search keeps a held remedy: compile's search only
    assert (stage.kind, stage.groups) == ("search", ["compile"])
    stage.trials += [1, 2]
    _, stage = guide.next_trial(study, fused)
    assert (stage.kind, stage.groups) == ("free", [FREE])


def test_small_buckets_and_missing_profiles_lead_to_the_free_search(tmp_path):
    space = parse_space(SPACE, tmp_path / "s.yaml")
    study = optuna.create_study(direction="maximize")
    quiet = incumbent(
        study,
        {
            "data_stall": 0.04,
            "other": 0.96,
            "compute_serial": 0.0,
            "comm_wait": 0.0,
            "launch_overhead": 0.0,
        },
        {"data.num_workers": 0, "optimizer.impl": "foreach", "checkpointing.regions": "none"},
    )
    assert Guide(space, 2).next_trial(study, quiet)[1].groups == [FREE]
    assert Guide(space, 2, enabled=False).next_trial(study, quiet) == (None, None)
    assert buckets_of(study.trials[0]) is not None


@pytest.mark.slow
def test_guided_study_records_the_chain(tmp_path, capsys):
    """A real tiny study: every stage's trials vary only its group; the chain is in diagnosis.json."""
    out = tmp_path / "run"
    argv = [
        "run",
        "--space",
        "quick",
        "--trials",
        "5",
        "--synthetic",
        "--confirm-rounds",
        "0",
        "--converge-after",
        "0",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--batch-size",
        "2",
        "--stage-trials",
        "2",
        "--no-prune",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    assert " -> " in capsys.readouterr().out
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / "study.journal"))
    )
    study = optuna.load_study(study_name="gr00t_n16-tiny-quick", storage=storage)
    diagnosis = json.loads((out / "diagnosis.json").read_text())
    assert diagnosis["stages"] == json.loads(study.user_attrs[STUDY_ATTR])
    space = {k.key: k for k in load_space("quick").knobs}
    trials = study.trials
    assert trials[0].user_attrs["stock"] and "stage" not in trials[0].user_attrs
    assert (out / "profiles" / "trial-0000" / "classification.summary").exists()
    assert list((out / "profiles" / "trial-0000").glob("*.json.gz")), (
        "the stock trial keeps its trace"
    )
    first = diagnosis["stages"][0]
    assert first["incumbent"] == 0 and first["buckets"] == buckets_of(trials[0])
    for stage in diagnosis["stages"]:
        inc = trials[stage["incumbent"]]
        for n in stage["trials"]:
            t = trials[n]
            assert t.user_attrs["stage"] == stage["stage"]
            for key, value in t.params.items():
                if (
                    (
                        space[key].group not in stage["groups"]
                        or stage["kind"] == "remedy"
                        and space[key].remedy is None
                    )
                    and stage["kind"] != "free"
                    and key in inc.params
                ):
                    assert value == inc.params[key], (n, key)
        if stage["kind"] == "remedy" and stage["trials"]:
            t = trials[stage["trials"][0]]
            for key in stage["knobs"]:
                if space[key].remedy is not None:
                    assert space[key].decode(t.params[key]) == space[key].remedy
        if stage["best_trial"] is not None:
            assert stage["gain"] == pytest.approx(
                stage["best_samples_per_s"] / stage["incumbent_samples_per_s"]
            )
    assert sum(len(s["trials"]) for s in diagnosis["stages"]) == len(trials) - 1
    assert json.loads((out / "parity.json").read_text())["passed"]


@pytest.mark.slow
def test_clearly_slower_trials_are_pruned(tmp_path, capsys):
    """Batch size 4 of the crashy workload sleeps 3 s per batch: pruned long before its 8 steps end."""
    space = tmp_path / "slow.yaml"
    space.write_text("knobs:\n  batch_size: {type: categorical, choices: [2, 4], group: data}\n")
    out = tmp_path / "run"
    name = "tests.search.crashy.Workload-tiny-slow"
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out.mkdir() or out / "study.journal"))
    )
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
    study.enqueue_trial({"batch_size": 2}, user_attrs={"stock": True})
    study.enqueue_trial({"batch_size": 4})
    argv = [
        "run",
        "--workload",
        "tests.search.crashy:Workload",
        "--preset",
        "tiny",
        "--space",
        str(space),
        "--trials",
        "2",
        "--synthetic",
        "--confirm-rounds",
        "0",
        "--converge-after",
        "0",
        "--steps",
        "8",
        "--warmup",
        "1",
        "--profile-steps",
        "0",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    assert "pruned (pruned after" in capsys.readouterr().out
    trials = optuna.load_study(study_name=name, storage=storage).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.PRUNED]
    # pruned before its last step (how early depends on the machine's load: stock's steps slow down too)
    assert 2 <= len(trials[1].intermediate_values) < 8 and len(trials[0].intermediate_values) == 8
    assert reason_of(trials[1]) == "pruned"


def test_a_group_is_searched_again_from_a_new_incumbent(tmp_path):
    """Data after graphs: a group searched from an older incumbent may pay again; twice is the limit."""
    space = parse_space(
        {
            "knobs": {
                k: {kk: vv for kk, vv in v.items() if kk != "remedy"}
                for k, v in SPACE["knobs"].items()
            }
        },
        tmp_path / "s.yaml",
    )  # no remedies: searches only
    study = optuna.create_study(direction="maximize")
    params = {"data.num_workers": 0, "optimizer.impl": "foreach", "checkpointing.regions": "none"}
    data_bound = {
        "data_stall": 0.6,
        "launch_overhead": 0.3,
        "compute_serial": 0.1,
        "comm_wait": 0.0,
        "other": 0.0,
    }
    stock = incumbent(study, data_bound, params)
    guide = Guide(space, stage_trials=1)
    assert guide.next_trial(study, stock)[1].groups == ["data"]
    guide.stages[-1].trials.append(1)
    assert guide.next_trial(study, stock)[1].groups == [
        "optimizer"
    ]  # data was searched from this incumbent
    guide.stages[-1].trials.append(2)
    faster = incumbent(study, data_bound, {**params, "optimizer.impl": "fused"}, value=20.0)
    again = guide.next_trial(study, faster)[1]
    assert again.groups == ["data"] and again.incumbent == faster.number
    guide.stages[-1].trials.append(3)
    newest = incumbent(study, data_bound, {**params, "data.num_workers": 2}, value=30.0)
    assert guide.next_trial(study, newest)[1].groups == ["optimizer"]  # data twice: blocked


def test_fp8_is_dropped_where_it_cannot_run(tmp_path):
    from autotune.config.compat import Machine

    space = load_space("gr00t_n16")
    kept, notes = space.for_machine(Machine(cuda=True, capability=(7, 0)))
    dit = next(k for k in kept.knobs if k.key == "precision.regions.dit")
    assert "fp8" not in dit.choices and any("choice fp8 dropped" in n for n in notes)


def test_a_small_discrete_group_is_enumerated_not_sampled_again(tmp_path):
    """A search of checkpointing (two values here) from an incumbent that has one of them measures
    the other, then ends: no trial repeats a measured combination."""
    space = parse_space(SPACE, tmp_path / "s.yaml")
    study = optuna.create_study(direction="maximize")
    params = {"data.num_workers": 2, "optimizer.impl": "fused", "checkpointing.regions": "dit"}
    best = incumbent(
        study,
        {
            "compute_serial": 0.9,
            "launch_overhead": 0.1,
            "data_stall": 0.0,
            "comm_wait": 0.0,
            "other": 0.0,
        },
        params,
    )
    guide = Guide(space, stage_trials=3)
    # remedies held already: the searches; compile's first (the optimizer is held at its remedy)
    fixed, first = guide.next_trial(study, best)
    assert (first.kind, first.groups) == ("search", ["compile"]) and fixed == {
        **params,
        "checkpointing.regions": "none",
    }
    incumbent(study, {"compute_serial": 0.9, "other": 0.1}, fixed, value=8.0)
    first.trials.append(1)
    # both values measured: the stage ends after 1 of its 3 trials; the optimizer is held at its remedy,
    # which a search keeps: nothing left to search, the free search
    fixed, nxt = guide.next_trial(study, best)
    assert nxt is not first and nxt.kind == "free" and fixed is None
    stage = first
    # a group with an int knob is left to the sampler
    data = untried(guide.space, study, replace(stage, groups=["data"]), best)
    assert data is None


def test_enumeration_changes_one_knob_before_two(tmp_path):
    spec = {
        "knobs": {
            "ddp.comm_hook": {
                "type": "categorical",
                "choices": ["none", "bf16", "fp16"],
                "group": "ddp",
            },
            "ddp.static_graph": {"type": "bool", "group": "ddp"},
        }
    }
    space = parse_space(spec, tmp_path / "s.yaml")
    dists = {
        "ddp.comm_hook": CategoricalDistribution(["none", "bf16", "fp16"]),
        "ddp.static_graph": CategoricalDistribution([False, True]),
    }
    study = optuna.create_study(direction="maximize")
    study.add_trial(
        create_trial(
            params={"ddp.comm_hook": "none", "ddp.static_graph": False},
            distributions=dists,
            value=1.0,
            user_attrs=attrs_of(measured(1.0, buckets={"comm_wait": 1.0})),
        )
    )
    guide = Guide(space, stage_trials=5)
    fixed, stage = guide.next_trial(study, study.trials[0])
    assert stage.groups == ["ddp"] and fixed == {"ddp.comm_hook": "none", "ddp.static_graph": True}
    assert untried(guide.space, study, stage, study.trials[0]) == [
        {
            "ddp.comm_hook": "none",
            "ddp.static_graph": True,
        },  # one change, in the space's order of knobs and values
        {"ddp.comm_hook": "bf16", "ddp.static_graph": False},
        {"ddp.comm_hook": "fp16", "ddp.static_graph": False},
        {"ddp.comm_hook": "bf16", "ddp.static_graph": True},  # two changes last
        {"ddp.comm_hook": "fp16", "ddp.static_graph": True},
    ]
    # with fewer trials in the stage than combinations left, the sampler chooses
    small = Guide(space, stage_trials=2)
    fixed, stage = small.next_trial(study, study.trials[0])
    assert stage.groups == ["ddp"] and fixed == {}


def test_a_loader_bound_incumbent_has_its_loader_fixed_first(tmp_path):
    """Two H200s, stock: measured 105 samples/s (its loader's rate), 117 for its steps, and a profile whose
    largest bucket was compute (41 %, data 19 %): every remedy before the loader's was pruned below 105."""
    space = parse_space(SPACE, tmp_path / "s.yaml")
    study = optuna.create_study(direction="maximize")
    buckets = {
        "compute_serial": 0.41,
        "comm_wait": 0.2,
        "launch_overhead": 0.19,
        "data_stall": 0.03,
        "other": 0.17,
    }
    study.add_trial(
        create_trial(
            params={
                "data.num_workers": 0,
                "optimizer.impl": "foreach",
                "checkpointing.regions": "none",
            },
            distributions=DISTS,
            value=105.0,
            user_attrs=attrs_of(measured(105.0, buckets=buckets, bound=True, window=116.7)),
        )
    )
    stock = study.trials[-1]
    assert loader_stall(stock) == pytest.approx(0.1, abs=0.001)
    assert [b for b, _ in ranked_buckets(stock)] == [
        "data_stall",
        "compute_serial",
        "comm_wait",
        "launch_overhead",
        "other",
    ]
    fixed, stage = Guide(space, 2, together=False).next_trial(study, stock)
    assert (stage.kind, stage.bottleneck, stage.groups, stage.loader_bound) == (
        "remedy",
        "data_stall",
        ["data"],
        True,
    )
    assert stage.share == pytest.approx(0.1, abs=0.001) and fixed["data.num_workers"] == 2
    # a loader that held the step back by less than MIN_SHARE changes nothing; nor does one that kept up
    for window, bound in ((106.0, True), (200.0, False)):
        study.add_trial(
            create_trial(
                params=stock.params,
                distributions=DISTS,
                value=105.0,
                user_attrs=attrs_of(measured(105.0, buckets=buckets, bound=bound, window=window)),
            )
        )
        assert loader_stall(study.trials[-1]) < MIN_SHARE
        assert [b for b, _ in ranked_buckets(study.trials[-1])] == [
            "compute_serial",
            "comm_wait",
            "launch_overhead",
            "other",
        ]


def test_a_loader_short_of_the_compute_ceiling_joins_the_remedies(tmp_path):
    """A slow incumbent hides its loader (no data stall in its profile): where the workers sustain
    under half the samples/s the step's FLOPs allow at the measured matmul rate, the loader's
    remedies join the compute ones in one trial; a loader above that is left alone."""
    space = parse_space(SPACE, tmp_path / "s.yaml")
    buckets = {"launch_overhead": 0.55, "compute_serial": 0.44, "data_stall": 0.0, "other": 0.01}
    params = {"data.num_workers": 0, "optimizer.impl": "foreach", "checkpointing.regions": "none"}
    # the 24 GiB fit of full N1.6: 34.7 samples/s, its loader 55.8, 671 TFLOP/s, 1.64 TFLOP a sample
    ceiling = 671e12 / 1.637e12
    stages = {}
    for loader in (55.8, 0.6 * ceiling):
        study = optuna.create_study(direction="maximize")
        record = measured(
            34.7,
            buckets=buckets,
            loader=LoaderRate(window_samples_per_s=34.7, loader_samples_per_s=loader),
            matmul_tflops=671.0,
            flops_per_sample=1.637e12,
        )
        study.add_trial(
            create_trial(
                params=params, distributions=DISTS, value=34.7, user_attrs=attrs_of(record)
            )
        )
        stages[loader] = Guide(space, 2).next_trial(study, study.trials[-1])
    fixed, stage = stages[55.8]
    assert (stage.kind, stage.groups, stage.bottleneck) == (
        "remedies",
        ["optimizer", "data"],
        "launch_overhead+data_stall",
    )
    assert fixed["data.num_workers"] == 2 and fixed["optimizer.impl"] == "fused"
    assert stage.loader_short == pytest.approx([55.8, ceiling])
    fixed, stage = stages[0.6 * ceiling]
    assert loader_short(study.trials[-1]) is None  # the last study's: 0.6 of the ceiling
    assert (stage.kind, stage.groups, stage.loader_short) == ("remedy", ["optimizer"], None)
    assert fixed["data.num_workers"] == 0


def test_stock_and_reference_trials_are_never_pruned_and_a_faster_reference_prunes_nothing():
    from autotune.search.sampling import make_pruner

    study = optuna.create_study(direction="maximize")
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}

    def add(rate, **attrs):
        study.add_trial(
            create_trial(
                params={"x": 0.5},
                distributions=dist,
                value=rate,
                user_attrs={**attrs_of(measured(rate), constraint=-0.5), **attrs},
                intermediate_values={i: rate * (1 + 0.01 * (i % 3)) for i in range(8)},
            )
        )

    add(10.0, stock=True)
    add(50.0, reference="compile.regions=[all]")  # faster than any trial of the search
    add(20.0)  # the search's best

    def running(rate, **attrs):
        return create_trial(
            params={"x": 0.5},
            distributions=dist,
            state=TrialState.RUNNING,
            user_attrs=attrs,
            intermediate_values={i: rate * (1 + 0.01 * (i % 2)) for i in range(6)},
        )

    pruner = make_pruner(True)
    assert not pruner.prune(
        study, running(30.0)
    )  # beats the best of the search, slower than the reference
    assert pruner.prune(
        study, running(15.0)
    )  # clearly slower than the best of the search, step by step
    assert pruner.prune(study, running(5.0))  # under half of it
    assert not pruner.prune(study, running(5.0, reference="compile.regions=[all]"))
    assert not pruner.prune(study, running(5.0, stock=True))
    assert not make_pruner(True).prune(
        optuna.create_study(direction="maximize"), running(5.0)
    )  # nothing measured yet


COMM = {
    "knobs": {
        "graphs.mode": {
            "type": "categorical",
            "choices": ["none", "step"],
            "group": "graphs",
            "remedy": "step",
        },
        "ddp.static_graph": {
            "type": "bool",
            "when": {"graphs.mode": ["none"]},
            "group": "ddp",
            "remedy": True,
        },
        "ddp.comm_hook": {"type": "categorical", "choices": ["none", "bf16"], "group": "ddp"},
        "ddp.graph_overlap": {
            "type": "bool",
            "when": {"graphs.mode": ["step"]},
            "group": "ddp",
            "remedy": True,
        },
    }
}
COMM_DISTS = {
    "graphs.mode": CategoricalDistribution(["none", "step"]),
    "ddp.static_graph": CategoricalDistribution([False, True]),
    "ddp.comm_hook": CategoricalDistribution(["none", "bf16"]),
    "ddp.graph_overlap": CategoricalDistribution([False, True]),
}
COMM_BOUND = {
    "comm_wait": 0.5,
    "compute_serial": 0.3,
    "launch_overhead": 0.0,
    "data_stall": 0.0,
    "other": 0.2,
}


def comm_incumbent(study, params):
    study.add_trial(
        create_trial(
            params=params,
            distributions={k: COMM_DISTS[k] for k in params},
            value=10.0,
            user_attrs=attrs_of(measured(10.0, buckets=COMM_BOUND)),
        )
    )
    return study.trials[-1]


def test_a_remedy_that_does_not_exist_beside_the_incumbent_is_not_tried(tmp_path):
    """DDP's own knobs do nothing in a whole-step graph (its reducer is autotune's): the comm remedy of a
    step-graph incumbent is graph_overlap alone, and once that is held there is none (on two H200s the
    comm remedy of such an incumbent changed only DDP's knobs: the incumbent measured again)."""
    space = parse_space(COMM, tmp_path / "s.yaml")
    study = optuna.create_study(direction="maximize")
    eager = comm_incumbent(
        study, {"graphs.mode": "none", "ddp.static_graph": False, "ddp.comm_hook": "none"}
    )
    fixed, stage = Guide(space, 2).next_trial(study, eager)
    assert (stage.kind, stage.groups, stage.knobs) == ("remedy", ["ddp"], ["ddp.static_graph"])
    assert fixed == {"graphs.mode": "none", "ddp.static_graph": True, "ddp.comm_hook": "none"}
    graph = comm_incumbent(
        study, {"graphs.mode": "step", "ddp.comm_hook": "none", "ddp.graph_overlap": False}
    )
    fixed, stage = Guide(space, 2).next_trial(study, graph)
    assert (stage.kind, stage.groups, stage.knobs) == ("remedy", ["ddp"], ["ddp.graph_overlap"])
    assert fixed == {"graphs.mode": "step", "ddp.comm_hook": "none", "ddp.graph_overlap": True}
    overlapped = comm_incumbent(
        study, {"graphs.mode": "step", "ddp.comm_hook": "none", "ddp.graph_overlap": True}
    )
    _, stage = Guide(space, 2).next_trial(study, overlapped)
    assert (stage.kind, stage.groups) == (
        "search",
        ["ddp"],
    )  # the sampler over what exists: the compression


def test_a_compute_bound_step_graph_incumbent_tries_the_exact_model_then_optimizer_remedies():
    """The 1-GPU best of the fourth campaign (whole model compiled in a step graph, fused AdamW; its
    profile 94 % compute_serial): the compute bucket's remedies come first, the exact ones (skip the
    dead LM head, the vision MLP's bias in its GELU, the masked tokens' keys; master weights) before
    the searches; the GELU in the fc1 GEMM's epilogue, one bf16 rounding less, with them."""
    from autotune.config import config_from_dict
    from autotune.config.compat import Machine
    from autotune.search.params import sample

    space, _ = load_space("gr00t_n16").for_machine(
        Machine(cuda=True, capability=(9, 0), world_size=1, cpus=16)
    )
    study = optuna.create_study(direction="maximize")
    # a tuned 1-GPU configuration: the whole model compiled in a whole-step graph, fused AdamW, a fed loader
    incumbent = config_from_dict(
        {
            "graphs": {"mode": "step"},
            "compile": {"regions": ["all"]},
            "optimizer": {"impl": "fused"},
            "data": {"num_workers": 14, "prefetch_factor": 4, "device_prefetch": 2},
        }
    )
    study.enqueue_trial(space.stock_params(incumbent))
    trial = study.ask()
    sample(trial, space)
    buckets = {
        "compute_serial": 0.94,
        "launch_overhead": 0.04,
        "data_stall": 0.014,
        "comm_wait": 0.0,
        "other": 0.006,
    }
    trial.set_user_attr(RECORD, measured(202.0, buckets=buckets).to_json())
    study.tell(trial, 202.0)
    best = study.trials[-1]
    together = Guide(space, stage_trials=3).next_trial(study, best)[
        1
    ]  # first, every pending remedy in one trial
    assert (together.kind, together.groups) == ("remedies", ["model", "optimizer"])
    guide = Guide(space, stage_trials=3, together=False)
    fixed, stage = guide.next_trial(study, best)
    assert (stage.kind, stage.bottleneck, stage.groups, stage.knobs) == (
        "remedy",
        "compute_serial",
        ["model"],
        [
            "model.skip_dead_work",
            "model.bias_in_activation",
            "model.gelu_epilogue",
            "model.attended_kv_only",
        ],
    )
    model = {
        "model.skip_dead_work",
        "model.bias_in_activation",
        "model.gelu_epilogue",
        "model.attended_kv_only",
    }
    assert all(fixed[k] is True for k in model) and fixed["optimizer.impl"] == "fused"
    assert {k: v for k, v in fixed.items() if k not in model} == {
        k: v for k, v in best.params.items() if k not in model
    }
    stage.trials.append(1)
    fixed, stage = guide.next_trial(study, best)
    assert (stage.kind, stage.groups, stage.knobs) == ("remedy", ["optimizer"], ["optimizer.impl"])
    assert fixed["optimizer.impl"] == "master"


def test_a_knob_that_comes_to_exist_beside_a_remedy_takes_its_stock_value(tmp_path):
    """The whole model compiled (compile's remedy) brings ``compile.mode`` into existence: the remedy trial
    compiles in stock's mode, not in a mode the sampler drew (max-autotune costs minutes of GEMM benchmarks)."""
    from autotune.config import TrainConfig

    spec = {
        "knobs": {
            "compile.regions": {
                "type": "categorical",
                "choices": [[], ["all"]],
                "group": "compile",
                "remedy": ["all"],
            },
            "compile.mode": {
                "type": "categorical",
                "choices": ["default", "max-autotune-no-cudagraphs"],
                "group": "compile",
                "when": {"compile.regions": [["all"]]},
            },
        }
    }
    space = parse_space(spec, tmp_path / "s.yaml")
    study = optuna.create_study(direction="maximize")
    study.add_trial(
        create_trial(
            params={"compile.regions": "none"},
            value=10.0,
            distributions={"compile.regions": CategoricalDistribution(["none", "all"])},
            user_attrs=attrs_of(measured(10.0, buckets={"compute_serial": 0.9, "other": 0.1})),
        )
    )
    stock = study.trials[-1]
    cfg = TrainConfig()
    fixed, stage = Guide(space, stage_trials=2, stock=cfg).next_trial(study, stock)
    assert stage.kind in ("remedy", "remedies") and fixed == {
        "compile.regions": "all",
        "compile.mode": "default",
    }
    fixed, _ = Guide(
        space,
        stage_trials=2,
        stock=replace(cfg, compile=replace(cfg.compile, mode="max-autotune-no-cudagraphs")),
    ).next_trial(study, stock)
    assert fixed["compile.mode"] == "max-autotune-no-cudagraphs"
    fixed, _ = Guide(space, stage_trials=2).next_trial(
        study, stock
    )  # no stock given: left to the sampler
    assert fixed == {"compile.regions": "all"}


def test_n17s_compute_bound_best_lowers_one_region_at_a_time_frozen_text_layers_first():
    """N1.7's default-run best (every remedy, 94 % compute_serial): the model knobs it holds are its
    remedies, and the overlap is not searched in N1.7's space, so the compute bucket's first stage is
    the optimizer's single move (a bf16 first moment), then precision (whether or not that gained),
    whose five lowering moves (fp8 in one region each) outnumber a stage's four trials and
    are still taken one at a time in the space's order, never drawn by the sampler from every choice
    (raised precisions, several regions at once)."""
    from autotune.config import config_from_dict
    from autotune.config.compat import Machine
    from autotune.search.params import sample

    space, _ = load_space("gr00t_n17").for_machine(
        Machine(cuda=True, capability=(9, 0), world_size=1, cpus=16)
    )
    study = optuna.create_study(direction="maximize")
    best_cfg = config_from_dict(
        {
            "workload": "gr00t_n17",
            "graphs": {"mode": "step"},
            "compile": {"regions": ["all"]},
            "optimizer": {"impl": "master"},
            "data": {"num_workers": 14, "prefetch_factor": 4, "device_prefetch": 2},
            "model": {
                "skip_dead_work": True,
                "attended_kv_only": True,
                "frozen_prefix_no_grad": True,
                "gelu_epilogue": True,
            },
        }
    )
    buckets = {"compute_serial": 0.94, "launch_overhead": 0.04, "data_stall": 0.014, "other": 0.006}

    def tell(fixed, value):
        study.enqueue_trial(fixed)
        trial = study.ask()
        sample(trial, space)
        trial.set_user_attr(RECORD, measured(value, buckets=buckets).to_json())
        study.tell(trial, value)
        return study.trials[-1]

    best = tell(space.stock_params(best_cfg), 268.0)
    # with the stock configuration, as a run has it: a knob a move brings into existence (the fp8
    # scaling) takes stock's value, not the sampler's
    guide = Guide(space, stage_trials=4, stock=config_from_dict({"workload": "gr00t_n17"}))
    # first the optimizer's one move (its bf16 first moment: no recompile), a stage of its own
    fixed, stage = guide.next_trial(study, best)
    assert (stage.kind, stage.groups) == ("search", ["optimizer"])
    assert {k: v for k, v in fixed.items() if best.params.get(k) != v} == {
        "optimizer.exp_avg_dtype": "bf16"
    }
    stage.trials.append(tell(fixed, 268.5).number)  # gains nothing beyond noise: best stays
    fixed, stage = guide.next_trial(study, best)
    assert (stage.kind, stage.groups) == ("search", ["precision"])
    changed = {k: v for k, v in fixed.items() if best.params.get(k) != v}
    assert changed == {  # the scaling it brings into existence at stock's: one move a trial
        "precision.regions.llm_frozen": "fp8",
        "precision.fp8_frozen_scaling": "tensorwise",
    }
    # it pays (beyond the records' ±10 % spread): the stage goes on, one move a trial from the new
    # best; next, the text layers' activations scaled by rows (the knob exists once they are in fp8)
    stage.trials.append(tell(fixed, 300.0).number)
    again, _ = guide.next_trial(study, best)
    assert again != fixed  # from the old best, the same move is not repeated
    best = study.trials[-1]
    fixed, stage = guide.next_trial(study, best)
    assert stage.groups == ["precision"]
    assert {k: v for k, v in fixed.items() if best.params.get(k) != v} == {
        "precision.fp8_frozen_scaling": "rowwise"
    }
    stage.trials.append(tell(fixed, 330.0).number)
    best = study.trials[-1]
    fixed, stage = guide.next_trial(study, best)
    assert stage.groups == ["precision"]
    assert {k: v for k, v in fixed.items() if best.params.get(k) != v} == {
        "precision.regions.vision": "fp8"
    }


def test_old_traces_are_deleted_only_in_the_folders_trials_made(tmp_path):
    """A run folder handed over with ``profiles/trial-0099`` linked to a folder of the user's (or a
    ``trial-notes`` folder): the tuner, deleting the traces of trials it keeps none of, deletes
    nothing through the link nor in a folder no trial made; a trial's own old trace goes."""
    from autotune.search.diagnosis import keep_traces

    study = optuna.create_study(direction="maximize")
    params = {"data.num_workers": 0, "optimizer.impl": "foreach", "checkpointing.regions": "none"}
    for value, attrs in ((1.0, {STOCK: True}), (2.0, {}), (0.5, {})):  # the last: its trace goes
        record = attrs_of(measured(value, buckets={"compute": 1.0}))
        study.add_trial(create_trial(params=params, distributions=DISTS, value=value,
                                     user_attrs={**record, **attrs}))  # fmt: skip
    profiles = tmp_path / "run" / "profiles"
    for number in (0, 1, 2):
        (profiles / f"trial-{number:04d}").mkdir(parents=True)
        (profiles / f"trial-{number:04d}" / "rank0.pt.trace.json.gz").write_bytes(b"trace")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.json").write_text("{}")
    (profiles / "trial-0099").symlink_to(theirs)
    (profiles / "trial-notes").mkdir()
    (profiles / "trial-notes" / "n.json").write_text("{}")

    keep_traces(study, Guide(parse_space(SPACE, tmp_path / "s.yaml"), 2), tmp_path / "run")
    # rglob does not follow the link: theirs/notes.json stands for what is behind it
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.json*"))
    assert left == [
        "run/profiles/trial-0000/rank0.pt.trace.json.gz",  # stock
        "run/profiles/trial-0001/rank0.pt.trace.json.gz",  # the best
        "run/profiles/trial-notes/n.json",
        "theirs/notes.json",
    ]


def test_a_move_counts_as_measured_only_by_a_trial_that_ran_it():
    """A local move from an incumbent without a conditional knob (the fp8 scaling before any region
    is in fp8) does not set it: a trial counts as having measured the move if it held that knob at
    the value the move would run it with (stock's), not at another."""
    from autotune.search.candidates import _measured

    move = {"precision.regions.llm_frozen": "fp8"}
    brought = {"precision.fp8_frozen_scaling": "tensorwise"}
    ran = {**move, "precision.fp8_frozen_scaling": "tensorwise"}
    other = {**move, "precision.fp8_frozen_scaling": "rowwise"}
    assert _measured(move, [ran], brought)
    assert not _measured(move, [other], brought)
    assert _measured(move, [other], {"precision.fp8_frozen_scaling": None})  # no stock: any value
    assert not _measured(move, [{**move, "precision.regions.vision": "fp8"}], brought)
