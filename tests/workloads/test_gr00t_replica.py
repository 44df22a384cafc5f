"""The GR00T N1.6 replica: sizes match the spec, and the model behaves as the spec says."""

from __future__ import annotations

import pytest
import torch

from autotune.errors import WorkloadError
from autotune.workloads import get_workload
from autotune.workloads.gr00t_common.dit import DiTBlock, block_kind
from autotune.workloads.gr00t_n16.model import sample_flow_times
from autotune.workloads.gr00t_n16.presets import IMG_CONTEXT_ID, get_preset

W = get_workload("gr00t_n16")

# The spec's parameter table (../shared/spec/gr00t_n16.md), in parameters.
SPEC_ROWS = {
    "siglip2": 412.4e6,
    "mlp1": 13.6e6,
    "qwen3_layers": 805.4e6,
    "token_embedding_and_final_norm": 310.6e6,
    "dit": 1091.7e6,
    "state_encoder": 54.6e6,
    "action_encoder": 232.9e6,
    "action_decoder": 37.8e6,
    "position_embedding": 1.57e6,
    "vlln": 4096,
}


@pytest.fixture(scope="module")
def full_info():
    return W.describe("full")


@pytest.mark.parametrize("row", sorted(SPEC_ROWS))
def test_full_matches_spec_row(full_info, row):
    got, want = full_info["spec_modules"][row], SPEC_ROWS[row]
    assert abs(got - want) / want < 0.01, f"{row}: {got} vs spec {want}"


def test_full_totals_and_regions(full_info):
    assert abs(full_info["params_total"] - 2.96e9) / 2.96e9 < 0.01
    assert abs(full_info["params_trainable"] - 1.62e9) / 1.62e9 < 0.01
    assert set(full_info["regions"]) == {
        "vision",
        "connector",
        "llm_frozen",
        "llm_trainable",
        "vlln",
        "dit",
        "projectors",
    }
    assert sum(r["params"] for r in full_info["regions"].values()) == full_info["params_total"]
    assert full_info["regions"]["vision"]["trainable"] == 0
    assert full_info["regions"]["dit"]["trainable"] == full_info["regions"]["dit"]["params"]
    # Spec: about 1.7 TFLOP per LIBERO-like sample, forward and backward.
    assert 1.4e12 < full_info["flops_per_sample"] < 2.0e12


def test_medium_is_about_a_tenth_of_full(full_info):
    ratio = W.flops_per_sample("medium") / full_info["flops_per_sample"]
    assert 0.07 < ratio < 0.15


def test_unknown_preset_and_workload_are_named():
    with pytest.raises(
        WorkloadError, match=r"preset 'huge'.*known presets: \['full', 'medium', 'tiny'\]"
    ):
        W.check_preset("huge")
    with pytest.raises(
        WorkloadError, match=r"workload 'nope' is unknown; known workloads: \[.*'gr00t_n16'"
    ):
        get_workload("nope")


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    model = W.build_model("tiny", "cpu")
    batch = W.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(1))
    return model, batch


def test_tiny_loss_falls_over_30_steps(tiny):
    model, batch = tiny
    assert 1e5 < sum(p.numel() for p in model.parameters()) < 2e7
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    losses = []
    for _ in range(30):
        loss = W.loss(model, batch)
        assert torch.isfinite(loss)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    # Flow matching on fresh noise each step is noisy; 5-step means fall by ~9-17 % (seeds 0-2).
    assert last < 0.95 * first, losses


def _loss_with_seed(model, batch, seed=123):
    torch.manual_seed(seed)
    return W.loss(model, batch)


def test_padded_action_values_do_not_change_the_loss(tiny):
    model, batch = tiny
    model.eval()
    base = _loss_with_seed(model, batch)
    changed = dict(batch)
    changed["action"] = torch.where(
        batch["action_mask"], batch["action"], torch.full_like(batch["action"], 7.0)
    )
    assert torch.equal(_loss_with_seed(model, changed), base)
    real = dict(batch)
    real["action"] = torch.where(batch["action_mask"], batch["action"] + 0.5, batch["action"])
    assert not torch.equal(_loss_with_seed(model, real), base)


def test_dit_pattern():
    kinds = [block_kind(i) for i in range(8)]
    assert kinds == ["text", "self", "image", "self", "text", "self", "image", "self"]
    full = get_preset("full")
    assert [block_kind(i) for i in range(full.dit_layers)].count("self") == 16


@pytest.mark.parametrize("kind", ["text", "image", "self"])
def test_each_dit_layer_attends_to_what_the_pattern_says(kind):
    p = get_preset("tiny")
    torch.manual_seed(0)
    block = DiTBlock(p, kind).eval()
    B, L = 2, p.seq_len
    x, temb = torch.randn(B, 51, p.dit_width), torch.randn(B, p.dit_width)
    vl = torch.randn(B, L, p.llm_hidden)
    is_image = torch.zeros(B, L, dtype=torch.bool)
    is_image[:, 10:20] = True
    valid = torch.ones(B, L, dtype=torch.bool)
    valid[:, 30:] = False
    text_mask, image_mask = (valid & ~is_image)[:, None, None], is_image[:, None, None]

    def run(context):
        return block(x, temb, (context, text_mask), (context, image_mask))

    out = run(vl)
    noisy_text, noisy_image = vl.clone(), vl.clone()
    noisy_text[:, :10] += 5.0
    noisy_image[:, 10:20] += 5.0
    noisy_pad = vl.clone()
    noisy_pad[:, 30:] += 5.0
    changed = {
        "text": not torch.allclose(run(noisy_text), out),
        "image": not torch.allclose(run(noisy_image), out),
        "pad": not torch.allclose(run(noisy_pad), out),
    }
    assert changed == {"text": kind == "text", "image": kind == "image", "pad": False}


def test_each_sample_uses_its_own_embodiment_slot(tiny):
    model, batch = tiny
    model.eval()
    enc = model.projectors.state_encoder
    ids = torch.tensor([3, 17])
    x = torch.randn(2, 1, 128)
    out = enc(x, ids)
    with torch.no_grad():
        enc.layer1.W[17] += 1.0
    out2 = enc(x, ids)
    assert torch.equal(out2[0], out[0]) and not torch.allclose(out2[1], out[1])
    # Dense gradients: every slot gets a gradient tensor, only used slots non-zero.
    enc.zero_grad()
    enc(x, ids).sum().backward()
    nonzero = (enc.layer1.W.grad.abs().sum(dim=(1, 2)) > 0).nonzero().flatten().tolist()
    assert enc.layer1.W.grad.shape[0] == 32 and nonzero == [3, 17]


def test_dropout_active_in_training_only(tiny):
    model, batch = tiny
    dit = model.dit
    p = model.preset
    vl, mask = (
        torch.randn(2, p.seq_len, p.llm_hidden),
        torch.ones(2, 1, 1, p.seq_len, dtype=torch.bool),
    )
    args = (torch.randn(2, 51, p.dit_width), (vl, mask), (vl, mask), torch.tensor([10.0, 500.0]))
    dit.train()
    assert not torch.allclose(dit(*args), dit(*args))
    dit.eval()
    assert torch.equal(dit(*args), dit(*args))
    n_dropout = sum(isinstance(m, torch.nn.Dropout) for m in model.dit.modules())
    assert n_dropout == 4 * p.dit_layers


def test_beta_time_sampling():
    torch.manual_seed(0)
    t = sample_flow_times(400_000, "cpu")
    s = 1 - t / 0.999
    # s ~ Beta(1.5, 1): mean 0.6, CDF x**1.5.
    assert abs(s.mean().item() - 0.6) < 0.003
    for x in (0.2, 0.5, 0.8):
        assert abs((s <= x).float().mean().item() - x**1.5) < 0.005
    assert t.min() >= 0 and t.max() <= 0.999


def test_image_tokens_are_scattered_in_view_order(tiny):
    model, batch = tiny
    p = model.preset
    ids = batch["input_ids"]
    image_embeds = torch.arange(2 * p.views * p.image_tokens_per_view, dtype=torch.float32)
    image_embeds = image_embeds.reshape(2, -1, 1).expand(-1, -1, p.llm_hidden).contiguous()
    llm = model.llm_frozen
    blocks, llm.blocks = llm.blocks, torch.nn.ModuleList()
    try:
        h = llm(ids, image_embeds)
    finally:
        llm.blocks = blocks
    for b in range(2):
        slots = (ids[b] == IMG_CONTEXT_ID).nonzero().flatten()
        assert torch.equal(h[b, slots, 0], image_embeds[b, :, 0])


def test_inspect_of_an_empty_preset_names_it(capsys):
    """``inspect --preset "$UNSET"`` described the default preset as if it had been asked for."""
    from autotune.cli import main

    assert main(["inspect", "--preset", ""]) == 2
    assert capsys.readouterr().err.strip() == (
        "autotune: error: preset '' of workload 'gr00t_n16' is unknown; known presets: "
        "['full', 'medium', 'tiny']"
    )
