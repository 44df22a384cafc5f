"""A workload that breaks its contract is one line, not a traceback: a class leaving abstract
methods undefined, and ``autotune.prepare`` of a model that has no region map of the workload."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import autotune
from autotune.cli import main
from autotune.errors import WorkloadError
from autotune.workloads.stock import stock_config

HALF = """
from autotune.workloads import Workload


class Half(Workload):
    name = "half"
    presets = ("tiny",)
    default_preset = "tiny"

    def loss(self, model, batch):
        return model(batch).sum()
"""


def test_a_workload_class_missing_abstract_methods_is_one_line(tmp_path, capsys):
    (tmp_path / "half.py").write_text(HALF)
    spec = f"{tmp_path / 'half.py'}:Half"
    assert main(["train", "--workload", spec, "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"autotune: error: workload {spec!r}: Half does not define build_model, flops_per_sample, regions, "
        "synthetic_batch; a Workload implements every abstract method of autotune.workloads.Workload "
        "(see its docstring)\n"
    )


def test_prepare_of_a_model_without_the_workloads_region_map_names_the_fix():
    cfg = stock_config("gr00t_n16", "tiny", cuda=False)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    with pytest.raises(WorkloadError) as exc:
        autotune.prepare(cfg, model, loss_fn=lambda m, b: m(b["x"]).pow(2).mean())
    assert str(exc.value).startswith(
        "autotune.prepare: the model (Sequential) has no regions map of workload 'gr00t_n16' (AttributeError: "
    )
    assert str(exc.value).endswith(
        "pass regions= (and blocks=) naming its modules, e.g. regions={'model': [model]}"
    )


def test_prepare_with_the_models_own_regions_trains():
    cfg = stock_config("gr00t_n16", "tiny", cuda=False)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    run = autotune.prepare(
        cfg, model, loss_fn=lambda m, b: m(b["x"]).pow(2).mean(), regions={"model": [model]}
    )
    assert torch.isfinite(run.step({"x": torch.randn(2, 4)}))
