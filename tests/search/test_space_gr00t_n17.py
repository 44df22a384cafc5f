"""GR00T N1.7's own search space: it loads, names only N1.7's regions, holds the stock configuration,
offers fp8 per frozen region and the frozen-prefix knobs, and is what ``run`` and ``space`` use for
``--workload gr00t_n17`` on a GPU (``quick`` on a CPU, as for N1.6)."""

from __future__ import annotations

import pytest

from autotune.cli import main
from autotune.config.compat import Machine
from autotune.errors import SearchSpaceError
from autotune.search import load_space
from autotune.search.auto_space import check_space_regions, workload_facts
from autotune.search.space_choice import default_space
from autotune.workloads.stock import stock_config

H200 = Machine(cuda=True, capability=(9, 0), cpus=16)
CPU = Machine(cuda=False, cpus=2)


def test_the_space_loads_names_n17s_regions_and_holds_stock():
    space = load_space("gr00t_n17")
    base = stock_config("gr00t_n17", "full", cuda=True)
    check_space_regions(space, workload_facts(base))
    assert set(space.stock_params(base)) <= {k.key for k in space.knobs}
    gpu, _ = space.for_machine(H200)
    knobs = {k.key: k for k in gpu.knobs}
    for region in (
        "vision",
        "connector",
        "llm_frozen",
    ):  # the frozen backbone: fp8 weights cast once
        assert "fp8" in knobs[f"precision.regions.{region}"].choices
    assert list(knobs["model.frozen_prefix_no_grad"].choices) == [False, True]
    assert "precision.frozen_dtype" in knobs and "llm_trainable" not in str(space.knobs)


def test_run_searches_it_on_a_gpu_and_quick_on_a_cpu():
    assert (
        default_space(None, stock_config("gr00t_n17", "full", cuda=True), H200).name == "gr00t_n17"
    )
    assert default_space(None, stock_config("gr00t_n17", "tiny"), CPU).name == "quick"
    assert (
        default_space(None, stock_config("gr00t_n16", "full", cuda=True), H200).name == "gr00t_n16"
    )


@pytest.mark.parametrize(("cuda", "name"), [(True, "gr00t_n17"), (False, "quick")])
def test_autotune_space_prints_the_space_run_searches(tmp_path, capsys, monkeypatch, cuda, name):
    machine = H200 if cuda else CPU
    monkeypatch.setattr(Machine, "current", classmethod(lambda cls, world_size=1: machine))
    assert main(["space", "--workload", "gr00t_n17"]) == 0
    path = tmp_path / "mine.yaml"
    path.write_text(capsys.readouterr().out)
    printed = load_space(path)
    assert printed.name == name
    assert {k.key for k in printed.knobs} == {k.key for k in load_space(name).knobs}


def test_a_space_naming_a_model_knob_n17_does_not_declare_is_refused(tmp_path):
    """N1.6's vision-tower knobs are no knobs of N1.7: refused with the file, the knob and N1.7's
    model knobs before a study is created, not a traceback when the stock trial is queued."""
    path = tmp_path / "n16_knob.yaml"
    path.write_text("knobs:\n  model.bias_in_activation: {}\n  optimizer.impl: {}\n")
    base = stock_config("gr00t_n17", "tiny")
    with pytest.raises(
        SearchSpaceError,
        match=r"n16_knob.yaml: knobs.model.bias_in_activation: not a model knob of workload "
        r"'gr00t_n17'; its model knobs: \['attended_kv_only', 'category_matmul', "
        r"'freeze', 'frozen_prefix_no_grad', 'gelu_epilogue', 'skip_dead_work', 'unfreeze'\]",
    ):
        default_space(str(path), base, CPU)
