"""The space made from a workload's regions and the machine: every group there, nothing refused sampled."""

from __future__ import annotations

import optuna
import pytest

from autotune.cli import main
from autotune.config.compat import Machine, check_compatible
from autotune.errors import SearchSpaceError
from autotune.search.auto_space import auto_space, check_space_regions, workload_facts
from autotune.search.params import sample, trial_config
from autotune.search.space import load_space, parse_space
from autotune.workloads import register_workload
from autotune.workloads.stock import stock_config
from tests.workloads.userjob import UserJob

GPU2 = Machine(cuda=True, capability=(9, 0), world_size=2, cpus=16)
CPU1 = Machine(cuda=False, world_size=1, cpus=2)


@pytest.fixture(scope="module")
def facts():
    register_workload(UserJob(), replace=True)
    return workload_facts(stock_config("userjob"))


@pytest.mark.parametrize("machine", [GPU2, CPU1], ids=["2 GPUs", "CPU"])
def test_no_sampled_combination_is_refused(facts, machine):
    space, _ = auto_space(facts, machine).for_machine(machine)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial(
        space.stock_params(facts.stock)
    )  # the stock configuration is a point of the space
    for _ in range(300):
        cfg = trial_config(facts.stock, sample(study.ask(), space))
        check_compatible(cfg, machine, facts.regions)  # raises for a refused combination


def test_every_group_on_two_gpus_and_only_runnable_knobs_on_a_cpu(facts):
    gpu, _ = auto_space(facts, GPU2).for_machine(GPU2)
    assert {k.group for k in gpu.knobs} == {
        "data",
        "graphs",
        "compile",
        "memory",
        "precision",
        "kernels",
        "optimizer",
        "ddp",
    }
    keys = {k.key for k in gpu.knobs}
    assert {
        "precision.regions.blocks",
        "checkpointing.regions",
        "compile.regions",
        "ddp.graph_overlap",
        "data.device_prefetch",
        "precision.trainable_dtype",
    } <= keys
    compile_all = next(k for k in gpu.knobs if k.key == "compile.regions")
    assert ["inp", "blocks", "out"] in compile_all.choices and ["all"] in compile_all.choices
    cpu, notes = auto_space(facts, CPU1).for_machine(CPU1)
    assert {k.group for k in cpu.knobs} == {"data", "compile", "memory", "precision", "optimizer"}
    assert all(k.requires is None for k in cpu.knobs) and any(
        "graphs.mode: dropped" in n for n in notes
    )


def test_autotune_space_prints_a_space_file_that_loads(tmp_path, capsys):
    register_workload(UserJob(), replace=True)
    assert main(["space", "--workload", "userjob", "--nproc", "2"]) == 0
    path = tmp_path / "mine.yaml"
    path.write_text(capsys.readouterr().out)
    space = load_space(path)
    assert "ddp.bucket_cap_mb" in {k.key for k in space.knobs}


@pytest.mark.parametrize("workload", ["gr00t_n17", "userjob"])
def test_autotune_space_refuses_an_unknown_preset(workload, capsys):
    """A shipped space file serves every preset; the preset asked for is checked all the same."""
    register_workload(UserJob(), replace=True)
    assert main(["space", "--workload", workload, "--preset", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"autotune: error: preset 'nope' of workload '{workload}' is unknown")


def test_a_space_naming_another_workloads_region_is_refused(facts):
    with pytest.raises(
        SearchSpaceError,
        match=r"quick.yaml: knobs.checkpointing.regions: 'dit' is not a region of "
        r"workload 'userjob'; its regions: \['blocks', 'inp', 'out'\]",
    ):
        check_space_regions(load_space("quick"), facts)


def test_variants_of_one_key_must_exclude_each_other(tmp_path):
    knobs = {
        "graphs.mode": {"type": "categorical", "choices": ["none", "regions"], "group": "graphs"},
        "compile.regions": {"type": "categorical", "choices": [[], ["all"]], "group": "compile"},
        "compile.regions@g": {
            "type": "categorical",
            "choices": [[]],
            "when": {"graphs.mode": "regions"},
            "group": "compile",
        },
    }
    with pytest.raises(
        SearchSpaceError,
        match="compile.regions@g: sets compile.regions as knob compile.regions does",
    ):
        parse_space({"knobs": knobs}, tmp_path / "x.yaml")
