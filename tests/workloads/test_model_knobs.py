"""The model knobs change how the replica computes, never what: same loss, same gradients.

``model.skip_dead_work`` skips the LM-head logits (and the decoder on the state token), which the
stock replica computes as upstream does; ``model.category_matmul: grouped`` replaces the
projectors' per-sample weight copies by one grouped GEMM. Each is compared with the stock model on
the same batch and the same random draws (noise, flow times, dropout), in fp32 to float rounding.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from autotune.config import ModelConfig, config_from_dict
from autotune.errors import ConfigError
from autotune.workloads import get_workload
from autotune.workloads.gr00t_common.dit import block_kind
from autotune.workloads.gr00t_common.layers import epilogue_takes, needs_gradient
from autotune.workloads.gr00t_common.projectors import (
    CategorySpecificLinear,
    grouped_supported,
    slot_groups,
)
from autotune.workloads.gr00t_n16.knobs import Gr00tModelKnobs
from autotune.workloads.gr00t_n16.presets import get_preset

W = get_workload("gr00t_n16")


def _loss_and_grads(
    options: ModelConfig, batch: dict, seed: int = 3
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = W.build_model("tiny", "cpu")
    W.apply_model_options(model, options)
    W.prepare_model(model)  # as a session does once the weights have their dtype
    torch.manual_seed(seed)  # the same noise, flow times and dropout in both models
    loss = W.loss(model, batch)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.requires_grad}


def gr00t_model(**knobs) -> ModelConfig:
    """The ``model`` section of a gr00t_n16 configuration with ``knobs`` set."""
    return ModelConfig(options=Gr00tModelKnobs(**knobs))


def _assert_same(options: ModelConfig, batch: dict) -> None:
    ref_loss, ref = _loss_and_grads(gr00t_model(), batch)
    loss, grads = _loss_and_grads(options, batch)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    assert grads.keys() == ref.keys()
    for name in ref:
        assert grads[name] is not None, f"{name}: no gradient"
        torch.testing.assert_close(
            grads[name], ref[name], rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}"
        )


def _batch(ids: list[int] | None = None) -> dict:
    batch = W.synthetic_batch("tiny", 4, "cpu", torch.Generator().manual_seed(1))
    if ids is not None:
        batch["embodiment_id"] = torch.tensor(ids)
    return batch


def test_skip_dead_work_gives_the_same_loss_and_gradients():
    _assert_same(gr00t_model(skip_dead_work=True), _batch())


def test_bias_in_activation_gives_the_same_loss_and_gradients():
    _assert_same(gr00t_model(bias_in_activation=True), _batch())
    torch.manual_seed(0)
    model = W.build_model("tiny", "cpu")
    W.apply_model_options(model, gr00t_model(bias_in_activation=True))
    assert all(layer.bias_in_activation for layer in model.vision.blocks)


def test_gelu_epilogue_leaves_a_cpu_step_and_a_trained_tower_as_they_were():
    """The epilogue is cuBLASLt's: on a CPU the layer computes as before; and a tower whose ``fc1``
    needs a gradient (``model.unfreeze: [vision]``) keeps the path autograd differentiates."""
    _assert_same(gr00t_model(gelu_epilogue=True, bias_in_activation=True), _batch())
    torch.manual_seed(0)
    model = W.build_model("tiny", "cpu")
    W.apply_model_options(model, gr00t_model(gelu_epilogue=True))
    layer = model.vision.blocks[0]
    assert layer.gelu_epilogue
    h = torch.randn(2, 3, layer.fc1.in_features)
    assert not needs_gradient(layer.fc1, h)  # frozen: the epilogue may run (on CUDA)
    assert not epilogue_takes(layer.fc1, h)  # but not on a CPU
    layer.fc1.requires_grad_(True)
    assert needs_gradient(layer.fc1, h)
    with torch.no_grad():
        assert not needs_gradient(layer.fc1, h)


def _texts_of_length(batch: dict, lengths: list[int]) -> dict:
    """``batch`` with its samples' text lengths set (the layout of ``batch.layout_tokens``)."""
    from autotune.workloads.gr00t_common.batch import layout_tokens

    p = W.resolve("tiny")
    for b, n in enumerate(lengths):
        ids, real = layout_tokens(list(range(10, 10 + n)), p)
        batch["input_ids"][b] = torch.tensor(ids)
        batch["attention_mask"][b] = torch.arange(p.seq_len) < real
    return batch


def test_attended_kv_only_gives_the_same_loss_and_gradients():
    """The longest text fills the text layers' static room exactly; the shortest leaves it mostly filler."""
    p = W.resolve("tiny")
    _assert_same(gr00t_model(attended_kv_only=True), _batch())
    _assert_same(
        gr00t_model(attended_kv_only=True),
        _texts_of_length(_batch(), [p.max_text_tokens, 1, 7, p.max_text_tokens]),
    )


def test_fused_frozen_qkv_gives_the_same_loss_and_gradients():
    _assert_same(gr00t_model(fused_frozen_qkv=True), _batch())


def test_fused_frozen_qkv_runs_one_gemm_in_the_frozen_layers_only_and_saves_nothing_more():
    from autotune.workloads.gr00t_common.layers import FusedProjections

    def built(fused: bool):
        torch.manual_seed(0)
        model = W.build_model("tiny", "cpu")
        W.apply_model_options(model, gr00t_model(fused_frozen_qkv=fused))
        W.prepare_model(model)
        return model

    plain, fused = built(False), built(True)
    assert plain.state_dict().keys() == fused.state_dict().keys()
    calls = {"vision": 0, "llm_frozen": 0, "llm_trainable": 0}
    for region in calls:
        for m in getattr(fused, region).modules():
            if hasattr(m, "q_proj"):
                m.q_proj.register_forward_hook(
                    lambda *_, r=region: calls.__setitem__(r, calls[r] + 1)
                )
    W.loss(fused, _batch())
    # the frozen towers' q/k/v run as the fused GEMM; the trainable LLM layers keep theirs apart
    assert calls["vision"] == calls["llm_frozen"] == 0 and calls["llm_trainable"] > 0
    attns = [m for m in fused.modules() if isinstance(getattr(m, "qkv", None), FusedProjections)]
    assert attns and all(
        (m.qkv.weight is not None) == (not m.q_proj.weight.requires_grad) for m in attns
    )
    q, k, v = (
        fused.vision.blocks[0].self_attn.q_proj,
        fused.vision.blocks[0].self_attn.k_proj,
        fused.vision.blocks[0].self_attn.v_proj,
    )
    assert torch.equal(
        fused.vision.blocks[0].self_attn.qkv.weight, torch.cat([q.weight, k.weight, v.weight])
    )


def test_attended_keeps_each_samples_tokens_in_order_then_masked_filler():
    from autotune.workloads.gr00t_common.dit import attended

    vl = torch.arange(2 * 6, dtype=torch.float32).reshape(2, 6, 1)
    keep = torch.tensor([[0, 1, 0, 1, 1, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    context, mask = attended(vl, keep, 3)
    assert context[..., 0].tolist() == [[1, 3, 4], [6, 7, 8]]
    assert mask.shape == (2, 1, 1, 3) and mask[:, 0, 0].tolist() == [
        [True] * 3,
        [True, False, False],
    ]


def test_attended_kv_only_projects_keys_and_values_for_the_attended_tokens_only():
    """The cross layers' key and value projections run on the image tokens and on the text room
    instead of the whole sequence, and the useful count leaves out the rest (with their input and
    weight gradients, each the forward GEMM's size, and the attention over the masked keys)."""
    p = W.resolve("tiny")
    images = p.views * p.image_tokens_per_view
    forward, step = {}, {}
    for on in (False, True):
        model = W.build_model("tiny", "meta")
        model.configure(skip_dead_work=True, attended_kv_only=on)
        batch = W.synthetic_batch("tiny", 1, "meta", torch.Generator().manual_seed(0))
        with FlopCounterMode(display=False) as fwd:
            loss = model(batch)
        with FlopCounterMode(display=False) as bwd:
            loss.backward()
        forward[on], step[on] = fwd.get_flop_counts(), fwd.get_total_flops() + bwd.get_total_flops()

    def kv(
        on: bool, kinds: tuple[str, ...]
    ) -> int:  # forward FLOPs of the key and value projections
        total = 0
        for module, ops in forward[on].items():
            parts = module.split(".")
            if (
                parts[-1] in ("to_k", "to_v")
                and parts[-2] == "attn1"
                and block_kind(int(parts[-3])) in kinds
            ):
                total += sum(ops.values())
        return total

    layers = {k: sum(block_kind(i) == k for i in range(p.dit_layers)) for k in ("text", "image")}
    per_row = 2 * 2 * p.llm_hidden * p.dit_width  # K and V, 2 FLOPs a multiply-add
    assert kv(False, ("text", "image")) == per_row * p.seq_len * (layers["text"] + layers["image"])
    assert kv(True, ("text", "image")) == per_row * (
        (p.seq_len - images) * layers["text"] + images * layers["image"]
    )
    assert kv(True, ("self",)) == kv(False, ("self",)) > 0
    saved = kv(False, ("text", "image")) - kv(True, ("text", "image"))
    assert step[False] - step[True] > 3 * saved
    assert (
        W.flops_per_sample("tiny") - W.useful_flops_per_sample("tiny") > 3 * saved
    )  # and the LM head


@pytest.mark.parametrize("ids", [[5, 5, 5, 5], [7, 2, 7, 30]], ids=["one embodiment", "mixed"])
def test_grouped_projectors_give_the_same_loss_and_dense_gradients(ids):
    _assert_same(gr00t_model(category_matmul="grouped"), _batch(ids))
    _, grads = _loss_and_grads(gr00t_model(category_matmul="grouped"), _batch(ids))
    w = grads["projectors.action_encoder.W2.W"]
    assert (
        w.shape[0] == get_preset("tiny").num_embodiments
    )  # a gradient for every slot, as AdamW expects
    unused = [s for s in range(w.shape[0]) if s not in ids]
    assert torch.count_nonzero(w[unused]) == 0 and torch.count_nonzero(w[ids]) > 0


def test_grouped_linear_in_bf16_matches_the_gather_to_bf16_rounding():
    torch.manual_seed(0)
    layer = CategorySpecificLinear(8, 32, 48)
    x = torch.randn(6, 5, 32, dtype=torch.bfloat16)
    ids, dy = torch.tensor([3, 1, 3, 3, 6, 1]), torch.randn(6, 5, 48, dtype=torch.bfloat16)
    out = {}
    for mode in ("gather", "grouped"):
        layer.matmul, layer.W.grad = mode, None
        xi = x.clone().requires_grad_()
        y = layer(xi, ids)
        y.backward(dy)
        out[mode] = (y.float(), xi.grad.float(), layer.W.grad.clone())
    for got, want in zip(out["grouped"], out["gather"]):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_grouped_gemm_on_cuda_only_for_bf16_widths_its_kernel_takes():
    bf16 = torch.bfloat16
    assert grouped_supported("cuda", bf16, 1536, 1536)
    # N1.7's 132-wide state and action layers: rows of 264 bytes, not a multiple of 16
    assert not grouped_supported("cuda", bf16, 132, 1536)
    assert not grouped_supported("cuda", bf16, 1024, 132)
    assert not grouped_supported("cuda", torch.float32, 1536, 1536)
    assert grouped_supported("cpu", torch.float32, 132, 132)


def test_grouped_gemm_on_the_cpu_only_for_widths_of_16_byte_rows():
    """The CPU kernel has the same stride rule: N1.7's 132-wide layers in bf16 (what ``train``
    computes under autocast) take the gather path instead of failing in the kernel."""
    bf16 = torch.bfloat16
    assert not grouped_supported("cpu", bf16, 132, 64)
    assert not grouped_supported("cpu", bf16, 64, 132)
    assert not grouped_supported("cpu", torch.float32, 130, 64)
    assert grouped_supported("cpu", bf16, 64, 64)
    layer = CategorySpecificLinear(4, 132, 64)
    layer.matmul = "grouped"
    x = torch.randn(3, 5, 132, dtype=bf16)
    assert layer(x, torch.tensor([2, 0, 2])).shape == (3, 5, 64)


def test_slot_groups_have_static_shapes_whatever_the_ids():
    for ids in ([0, 0, 0], [2, 0, 1], [31, 31, 4]):
        order, offs = slot_groups(torch.tensor(ids), 32, tokens=5)
        assert order.shape == (3,) and offs.shape == (32,) and offs.dtype == torch.int32
        assert int(offs[-1]) == 15 and bool((offs[1:] >= offs[:-1]).all())


def _step_flops(preset: str, **options) -> float:
    """FLOPs of one sample's forward and backward with the model configured by ``options``."""
    model = W.build_model(preset, "meta")
    model.configure(**options)
    batch = W.synthetic_batch(preset, 1, "meta", torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter:
        model(batch).backward()
    return counter.get_total_flops()


def _masked_kv(preset: str) -> float:
    """What ``attended_kv_only`` leaves out of a step: the masked tokens' keys and values."""
    return _step_flops(preset, skip_dead_work=True) - _step_flops(
        preset, skip_dead_work=True, attended_kv_only=True
    )


def test_stock_computes_the_lm_head_logits_and_the_knob_drops_exactly_them():
    """The dead work is real in the replica: the stock forward counts 2 L D V FLOPs a sample for the
    logits (upstream's cost), which the useful count leaves out (with the decoder on the state token
    and the keys and values of masked tokens)."""
    p = W.resolve(
        "tiny"
    )  # what build_model builds (fitted where an earlier test fitted the shared workload)
    model = W.build_model("tiny", "meta")
    hidden = torch.empty(1, p.seq_len, p.llm_hidden, device="meta")
    _, logits = model.llm_trainable(hidden)
    assert logits.shape == (1, p.seq_len, p.vocab_size)
    with FlopCounterMode(display=False) as with_logits:
        model.llm_trainable(hidden)
    model.configure(skip_dead_work=True)
    with FlopCounterMode(display=False) as without:
        assert model.llm_trainable(hidden)[1] is None
    lm_head = 2 * p.seq_len * p.llm_hidden * p.vocab_size
    assert with_logits.get_total_flops() - without.get_total_flops() == lm_head
    dead = W.flops_per_sample("tiny") - W.useful_flops_per_sample("tiny")
    decoder_on_state_token = (
        2 * (p.dit_out * p.decoder_hidden + p.decoder_hidden * p.action_dim) * 3
    )  # fwd + 2 bwd
    assert dead == lm_head + decoder_on_state_token + _masked_kv("tiny")


def test_full_useful_flops_leave_out_the_lm_head_and_the_masked_keys():
    full = get_preset("full")
    dead = W.flops_per_sample("full") - W.useful_flops_per_sample("full")
    lm_head = 2 * full.seq_len * full.llm_hidden * full.vocab_size  # ~137 GFLOP
    assert dead == pytest.approx(lm_head + _masked_kv("full"), rel=1e-3)
    assert (
        0.07 < lm_head / W.flops_per_sample("full") < 0.10
        and 0.02 < _masked_kv("full") / W.flops_per_sample("full") < 0.06
    )


def test_session_applies_the_model_knobs():
    from autotune.train.session import Session

    cfg = config_from_dict(
        {
            "preset": "tiny",
            "batch_size": 2,
            "device": "cpu",
            "data": {"source": "synthetic"},
            "model": {
                "skip_dead_work": True,
                "category_matmul": "grouped",
                "attended_kv_only": True,
                "fused_frozen_qkv": True,
            },
        }
    )
    s = Session(cfg)
    assert (
        s.model.skip_dead_work
        and not s.model.llm_trainable.compute_logits
        and s.model.attended_kv_only
    )
    assert {m.matmul for m in s.model.modules() if isinstance(m, CategorySpecificLinear)} == {
        "grouped"
    }
    attn = s.model.vision.blocks[0].self_attn  # fused after the frozen weights took their dtype
    assert attn.qkv.weight is not None and attn.qkv.weight.dtype == attn.q_proj.weight.dtype
    loss, norm = s.step(s.workload.synthetic_batch("tiny", 2, "cpu"))
    assert torch.isfinite(loss) and torch.isfinite(norm)


@pytest.mark.parametrize("knob", [f.name for f in dataclasses.fields(Gr00tModelKnobs)])
def test_a_workload_without_model_knobs_refuses_them_when_the_file_is_read(tmp_path, knob):
    """A knob is declared by the workload that applies it: another workload's file cannot name it."""
    from autotune.config import load_config

    value = getattr(Gr00tModelKnobs(), knob)
    path = tmp_path / "c.yaml"
    path.write_text(f"workload: image_classifier\nmodel:\n  {knob}: {json.dumps(value)}\n")
    with pytest.raises(
        ConfigError, match=rf"c.yaml: model.{knob}: unknown key; allowed: \['freeze', 'unfreeze'\]"
    ):
        load_config(path)


def test_flop_counts_are_kept_on_disk_and_a_bad_file_is_counted_again(tmp_path, monkeypatch):
    """Every run needs the counts for its MFU: they are counted once a preset and read after."""
    from autotune.workloads.gr00t_common.flops import cached_total, count_flops
    from autotune.workloads.gr00t_n16.workload import Gr00tN16

    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    counted = count_flops(W, "tiny")["total"]
    assert cached_total(Gr00tN16(), "tiny", useful=False) == counted
    files = list((tmp_path / "flops").glob("*.json"))
    assert len(files) == 1
    files[0].write_text(files[0].read_text().replace(str(counted), str(counted + 1)))
    assert cached_total(Gr00tN16(), "tiny", useful=False) == counted + 1  # read, not counted
    useful = cached_total(Gr00tN16(), "tiny", useful=True)
    assert useful < counted and len(list((tmp_path / "flops").glob("*.json"))) == 2  # its own key
    files[0].write_text("{not json")
    assert cached_total(Gr00tN16(), "tiny", useful=False) == counted  # counted again, and kept
    assert json.loads(files[0].read_text())["value"] == counted


def test_regions_and_what_trains_are_kept_on_disk_beside_the_counts(tmp_path, monkeypatch):
    """A tuner asks which regions train before it starts: read from the cache, the model is not built."""
    from autotune.workloads.base import Workload
    from autotune.workloads.gr00t_n17.workload import Gr00tN17

    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    built = Workload.region_trains(Gr00tN17(), "tiny")  # the meta-device model, asked
    assert Gr00tN17().region_trains("tiny") == built
    assert [r for r, trains in built.items() if not trains] == ["vision", "connector", "llm_frozen"]

    def no_build(*args, **kwargs):
        raise AssertionError("built again")

    monkeypatch.setattr(Gr00tN17, "build_model", no_build)
    assert list(Gr00tN17().region_trains("tiny").items()) == list(built.items())  # in order
    for path in (tmp_path / "flops").glob("*.json"):
        path.write_text("{not json")
    with pytest.raises(AssertionError, match="built again"):  # a bad file is found again
        Gr00tN17().region_trains("tiny")
