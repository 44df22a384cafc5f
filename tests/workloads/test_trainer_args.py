"""``autotune trainer-args`` of real configurations, passed to ``transformers.TrainingArguments``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from autotune.cli import main  # noqa: E402
from autotune.config import load_config, save_config  # noqa: E402
from autotune.workloads.stock import stock_config  # noqa: E402

H200_BEST = Path(__file__).parents[2] / "reports/examples/full-1gpu-h200/best.yaml"


def _export(capsys, path, *extra) -> dict:
    assert main(["trainer-args", "--config", str(path), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _accepted(tmp_path, kwargs: dict) -> None:
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), **kwargs)
    for key, value in kwargs.items():
        got = getattr(args, key)
        assert getattr(got, "value", got) == value, key


def test_the_h200_best_carries_its_optimizer_and_lists_its_model_knobs(tmp_path, capsys):
    cfg = load_config(H200_BEST)
    export = _export(capsys, H200_BEST, "--for", "cpu")
    kwargs, lost = export["training_arguments"], export["not_carried"]
    opt = cfg.optimizer
    assert kwargs["learning_rate"] == opt.lr and kwargs["weight_decay"] == opt.weight_decay
    assert [kwargs["adam_beta1"], kwargs["adam_beta2"]] == opt.betas
    assert kwargs["adam_epsilon"] == opt.eps and kwargs["max_grad_norm"] == opt.grad_clip
    assert kwargs["lr_scheduler_type"] == "cosine" and kwargs["max_steps"] == opt.total_steps
    assert kwargs["warmup_steps"] == round(opt.warmup_ratio * opt.total_steps)
    turned_on = [
        k
        for k in ("skip_dead_work", "bias_in_activation", "gelu_epilogue")
        if getattr(cfg.model, k)
    ]
    assert turned_on and all(f"model.{k}" in lost for k in turned_on)
    assert (
        "tf32" not in kwargs and "precision.tf32" in lost
    )  # refused without CUDA: said, not emitted
    _accepted(tmp_path, kwargs)


def test_a_cpu_made_configuration_is_accepted_on_the_cpu(tmp_path, capsys):
    cfg = stock_config("hf_causal_lm", "tiny")
    cfg.device = "cpu"
    cfg.optimizer.lr, cfg.optimizer.schedule, cfg.optimizer.grad_clip = 3e-4, "constant", 0.5
    save_config(cfg, tmp_path / "best.yaml")
    export = _export(capsys, tmp_path / "best.yaml", "--for", "cpu")
    kwargs = export["training_arguments"]
    assert kwargs["use_cpu"] and kwargs["learning_rate"] == 3e-4 and kwargs["max_grad_norm"] == 0.5
    assert kwargs["lr_scheduler_type"] == "constant_with_warmup"
    _accepted(tmp_path, kwargs)


@pytest.mark.parametrize(
    ("impl", "optim"), [("adamw8bit", "adamw_torch_8bit"), ("adamw4bit", "adamw_torch_4bit")]
)
def test_low_bit_states_carry_as_the_trainers_torchao_optimizers(tmp_path, capsys, impl, optim):
    cfg = stock_config("gr00t_n16", "tiny")
    cfg.optimizer.impl = impl
    save_config(cfg, tmp_path / "best.yaml")
    export = _export(capsys, tmp_path / "best.yaml", "--for", "cpu")
    kwargs = export["training_arguments"]
    assert kwargs["optim"] == optim and "optimizer.impl" not in export["not_carried"]
    assert optim in {n.value for n in transformers.training_args.OptimizerNames}
    _accepted(tmp_path, kwargs)


def test_an_offloaded_optimizer_state_is_listed_as_not_carried(tmp_path, capsys):
    cfg = stock_config("gr00t_n16", "tiny")
    cfg.optimizer.impl, cfg.optimizer.offload = "fused", True
    save_config(cfg, tmp_path / "best.yaml")
    export = _export(capsys, tmp_path / "best.yaml", "--for", "cpu")
    assert export["training_arguments"]["optim"] == "adamw_torch_fused"
    assert "CPUOffloadOptimizer" in export["not_carried"]["optimizer.offload"]
