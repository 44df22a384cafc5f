"""A workload that breaks its contract is one line, not a traceback: a class leaving abstract
methods undefined, and ``autotune.prepare`` of a model that has no region map of the workload."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import autotune
from autotune.cli import main
from autotune.errors import ConfigError, WorkloadError
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


def _mse(model, batch):
    return model(batch["x"]).pow(2).mean()


def test_prepare_refuses_an_optimizer_of_another_models_parameters():
    """It was rebuilt over its own groups: every step updated the other model, never this one."""
    cfg = stock_config("gr00t_n16", "tiny", cuda=False)
    model, other = nn.Linear(4, 1), nn.Linear(4, 1)
    with pytest.raises(WorkloadError) as exc:
        autotune.prepare(
            cfg,
            model,
            loss_fn=_mse,
            regions={"model": [model]},
            optimizer=torch.optim.AdamW(other.parameters()),
        )
    assert str(exc.value) == (
        "autotune.prepare: optimizer holds 2 parameter(s) that are not the model's (an optimizer of "
        "another model?); build it over model.parameters() of the model passed here"
    )


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"config": {"workload": "gr00t_n16"}}, ConfigError, "autotune.prepare: config is a dict; give "
         "a TrainConfig or the path of a configuration YAML (a run's best.yaml)"),
        ({"model": "model"}, WorkloadError, "autotune.prepare: model is a str; give the torch.nn.Module "
         "you built"),
        ({"optimizer": "adamw"}, WorkloadError, "autotune.prepare: optimizer is a str; give a fresh "
         "torch.optim optimizer over the model's parameters, or none (AdamW at the configuration's settings)"),
    ],
    ids=["config-dict", "model-str", "optimizer-str"],
)  # fmt: skip
def test_prepare_names_an_argument_of_another_kind(arguments, error, message):
    """Each was a traceback from deep inside (pathlib's TypeError, 'str' has no attribute 'defaults'),
    or blamed the workload's build_model() for the model the caller passed."""
    model = nn.Linear(4, 1)
    given = {"config": stock_config("gr00t_n16", "tiny", cuda=False), "model": model, **arguments}
    with pytest.raises(error) as exc:
        autotune.prepare(
            given.pop("config"),
            given.pop("model"),
            loss_fn=_mse,
            regions={"model": [model]},
            **given,
        )
    assert str(exc.value) == message


def test_a_step_of_a_batch_that_is_not_a_dict_is_named():
    cfg = stock_config("gr00t_n16", "tiny", cuda=False)
    model = nn.Linear(4, 1)
    run = autotune.prepare(cfg, model, loss_fn=_mse, regions={"model": [model]})
    with pytest.raises(
        WorkloadError, match=r"step\(\) takes a batch as a dict of tensors .*not a list$"
    ):
        run.step([torch.randn(2, 4)])


FLOPS = """
import torch
from torch import nn

from autotune.workloads import Workload


class Flops(Workload):
    name = "flops"
    presets = ("tiny",)
    default_preset = "tiny"

    def build_model(self, preset, device="cpu"):
        return nn.Linear(4, 1, device=device)

    def regions(self, model):
        return {"model": [model]}

    def loss(self, model, batch):
        return model(batch["x"]).pow(2).mean()

    def synthetic_batch(self, preset, batch_size, device, generator=None):
        return {"x": torch.randn(batch_size, 4, generator=generator).to(device)}

    def flops_per_sample(self, preset):
        return VALUE
"""


@pytest.mark.parametrize(
    ("value", "shown"), [("'many'", "'many'"), ("10**400", "1000000000"), ("float('nan')", "nan")]
)
def test_flops_that_are_not_a_finite_count_are_one_line(tmp_path, capsys, value, shown):
    """A text or an integer past a float was a TypeError/OverflowError traceback in inspect (and at
    the end of every trial); NaN went on into MFU."""
    path = tmp_path / f"flops{len(value)}.py"  # a module of its own name: each is imported once
    path.write_text(FLOPS.replace("VALUE", value))
    assert main(["inspect", "--workload", f"{path}:Flops"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"autotune: error: workload 'flops': flops_per_sample(): returned {shown}"
    )
    assert err.endswith(
        "; it must return the floating-point operations of one sample's step, a finite number >= 0\n"
    )
