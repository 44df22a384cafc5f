"""Knobs on Hugging Face transformers models (Llama, ViT), the Trainer export, and best.yaml in a
plain PyTorch loop through ``autotune.prepare``. Skipped without the ``hf`` extra."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

from autotune.cli import main  # noqa: E402
from autotune.config import config_from_dict, save_config  # noqa: E402
from autotune.train import knobs, precision  # noqa: E402
from autotune.train.graphs import FlatCall  # noqa: E402
from autotune.train.session import Session  # noqa: E402
from autotune.workloads import get_workload  # noqa: E402
from autotune.workloads.hf_causal_lm.presets import get_preset  # noqa: E402
from autotune.workloads.hf_causal_lm.workload import llama_config  # noqa: E402

LM = get_workload("hf_causal_lm")


def grads(model, batch, **kwargs):
    model.zero_grad()
    model(input_ids=batch["input_ids"], labels=batch["labels"], **kwargs).loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def test_checkpointed_decoder_layers_run_without_the_cache():
    """A checkpointed layer runs twice; with a cache it would append its keys twice (the 2048-vs-1024
    shape error on an H200). It runs without one, and its gradients are those of the plain model."""
    torch.manual_seed(0)
    model = LM.build_model("tiny")
    batch = LM.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(0))
    padded = {
        "attention_mask": torch.cat(
            [torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 61, dtype=torch.long)], 1
        ),
        "use_cache": True,
    }  # a padding mask: the attention mask is materialised, so doubled keys cannot pass
    plain = grads(model, batch, **padded)
    checkpointed = copy.deepcopy(model)
    knobs.apply_checkpointing(LM.blocks(checkpointed), ["layers"])
    assert torch.equal(grads(checkpointed, batch, **padded), plain)


def test_bf16_trainable_weights_and_a_tied_embedding_across_precisions():
    config = llama_config(get_preset("tiny"))
    config.tie_word_embeddings = True
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    regions = LM.regions(model)
    cfg = config_from_dict(
        {"precision": {"default": "bf16", "trainable_dtype": "bf16", "regions": {"head": "fp32"}}}
    ).precision
    precision.apply_precision(regions, cfg, torch.device("cpu"), graphs=False)
    assert (
        model.lm_head.weight is model.model.embed_tokens.weight
        and model.lm_head.weight.dtype == torch.float32
    )
    assert {p.dtype for m in regions["layers"] for p in m.parameters()} == {torch.bfloat16}
    batch = LM.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(0))
    assert torch.isfinite(grads(model, batch, use_cache=False).float()).all()


def test_a_session_of_the_lm_with_bf16_weights_and_checkpointing_trains():
    cfg = config_from_dict(
        {
            "workload": "hf_causal_lm",
            "preset": "tiny",
            "batch_size": 2,
            "device": "cpu",
            "precision": {
                "default": "bf16",
                "trainable_dtype": "bf16",
                "regions": {"embed": "fp32"},
            },
            "checkpointing": {"regions": ["layers", "head"]},
            "optimizer": {"impl": "fused"},
            "data": {"source": "synthetic"},
        }
    )
    s = Session(cfg)
    batch = s.workload.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(0))
    first, _ = s.step(batch)
    assert math.isfinite(float(first))


class Keyworded(nn.Module):
    def forward(self, x, *, scale, mask=None, flag=True):
        out = transformers.modeling_outputs.BaseModelOutput(
            last_hidden_state=x * scale, hidden_states=(x, x + 1)
        )
        return out if flag else out.last_hidden_state


def test_a_region_with_keywords_and_a_model_output_is_captured_as_tensors_in_and_out():
    """What graph capture sees of a region (``FlatCall``): tensors in and out, the rest held as recorded."""
    x, scale = torch.randn(2, 3), torch.tensor(2.0)
    flat = FlatCall(Keyworded(), ((x,), {"scale": scale, "mask": None, "flag": True}))
    assert flat.sample == (x, scale)
    out = flat(*flat.sample)
    assert isinstance(out, tuple) and len(out) == 3 and torch.equal(out[0], x * 2)
    rebuilt = flat.output(out)
    assert isinstance(rebuilt, transformers.modeling_outputs.BaseModelOutput) and torch.equal(
        rebuilt.hidden_states[1], x + 1
    )
    assert flat.tensors((x,), {"scale": scale, "mask": None, "flag": True}) == (x, scale)
    with pytest.raises(Exception, match="was called with other non-tensor arguments"):
        flat.tensors((x,), {"scale": scale, "mask": None, "flag": False})


def test_the_trainer_export_round_trips_through_training_arguments(tmp_path, capsys):
    cfg = config_from_dict(
        {
            "workload": "hf_causal_lm",
            "preset": "tiny",
            "device": "cpu",
            "compile": {"regions": ["all"]},
            "optimizer": {"impl": "fused"},
            "checkpointing": {"regions": ["layers"]},
            "data": {"num_workers": 3, "prefetch_factor": 4},
            "precision": {"default": "bf16"},
            "ddp": {"bucket_cap_mb": 50.0, "static_graph": True},
            "graphs": {"mode": "step"},
            "kernels": {"attention": "math"},
        }
    )
    save_config(cfg, tmp_path / "best.yaml")
    assert main(["trainer-args", "--config", str(tmp_path / "best.yaml"), "--json"]) == 0
    export = json.loads(capsys.readouterr().out)
    kwargs = export["training_arguments"]
    assert kwargs["optim"] == "adamw_torch_fused" and kwargs["torch_compile"] and kwargs["bf16"]
    assert (
        kwargs["gradient_checkpointing"]
        and kwargs["dataloader_num_workers"] == 3
        and kwargs["ddp_bucket_cap_mb"] == 50
    )
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), **kwargs)
    for key, value in kwargs.items():
        got = getattr(args, key)
        assert getattr(got, "value", got) == value, key
    assert {"graphs.mode", "kernels.attention", "checkpointing.regions"} <= set(
        export["not_carried"]
    )


def test_a_plain_loop_through_prepare_trains_as_autotune_train_does(tmp_path, capsys, monkeypatch):
    """The user builds the Llama and the token windows themselves; prepare applies best.yaml's knobs."""
    from autotune import prepare
    from autotune.workloads.hf_causal_lm.data import TokenWindows, shard_folder
    from autotune.workloads.stock import stock_config

    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    cfg = stock_config("hf_causal_lm", "tiny")
    cfg.device, cfg.batch_size, cfg.data.num_workers = "cpu", 2, 1
    cfg.checkpointing.regions, cfg.optimizer.impl = ["layers"], "fused"
    cfg.precision.regions, cfg.precision.trainable_dtype = {"layers": "bf16"}, "bf16"
    save_config(cfg, tmp_path / "best.yaml")
    assert (
        main(
            [
                "train",
                "--config",
                str(tmp_path / "best.yaml"),
                "--steps",
                "2",
                "--warmup",
                "0",
                "--json",
            ]
        )
        == 0
    )
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    trained = record.get("losses") or record["measurement"]["losses"]

    torch.manual_seed(cfg.seed)  # the user's model, as they would build it
    model = transformers.LlamaForCausalLM(llama_config(get_preset("tiny")))
    p = get_preset("tiny")
    run = prepare(
        tmp_path / "best.yaml",
        model,
        dataset=TokenWindows(shard_folder(p, None), p.seq_len, p.vocab_size),
    )
    assert run.model is model and any(g.get("fused") for g in run.optimizer.param_groups)
    mine = [float(run.step(batch)) for batch, _ in zip(run.loader, trained)]
    assert mine == pytest.approx(trained, rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["hf_causal_lm", "image_classifier"])
def test_autotune_run_tunes_it_with_no_space_and_no_preset(workload, tmp_path, monkeypatch, capsys):
    """The space made from its regions on this CPU, its CPU preset, its own data: no trial refused or failed."""
    import optuna

    from autotune.config import load_config

    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--workload",
                workload,
                "--trials",
                "2",
                "--confirm-rounds",
                "0",
                "--converge-after",
                "0",
                "--steps",
                "2",
                "--warmup",
                "1",
                "--profile-steps",
                "1",
                "--stage-trials",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert f"study '{workload}-tiny-auto'" in printed
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / "study.journal"))
    )
    trials = optuna.load_study(study_name=f"{workload}-tiny-auto", storage=storage).trials
    failed = {
        t.number: (t.user_attrs.get("reason"), t.user_attrs.get("error"))
        for t in trials
        if t.state == optuna.trial.TrialState.FAIL
    }
    assert len(trials) == 2 and not failed, failed
    best = load_config(out / "best.yaml")
    assert best.preset == "tiny" and best.data.source == LM_SOURCES[workload]
    assert "episodes" not in (out / "best.yaml").read_text()


LM_SOURCES = {"hf_causal_lm": "tokens", "image_classifier": "image_files"}


def test_the_lm_loss_weighs_by_the_tokens_it_averages_over():
    torch.manual_seed(0)
    model = LM.build_model("tiny")
    batch = LM.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(1))
    batch["labels"][0, 5:] = -100  # the first sample predicts fewer tokens
    logits = model(input_ids=batch["input_ids"], use_cache=False).logits
    targets = batch["labels"][:, 1:]
    summed = torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), targets.flatten(), ignore_index=-100, reduction="sum"
    )
    torch.testing.assert_close(LM.loss(model, batch) * LM.loss_weight(batch), summed)
