"""The GR00T N1.7 replica: its size against the architecture, its step, its backbone's pieces.

The reference counts below are computed here from the architecture's numbers, independently of the
replica's code: Cosmos-Reason2-2B's ``config.json`` (a Qwen3-VL-2B; lerobot's
``_cosmos_reason2_qwen3_vl_config`` holds a copy) and the released action-head config (lerobot's
``GR00T_N1_7_DEFAULTS``, which mirrors ``nvidia/GR00T-N1.7-3B``'s), with the layer shapes of
transformers' ``modeling_qwen3_vl.py`` and Isaac-GR00T's ``gr00t/model/modules/dit.py``:

=====================  ===============  ======================================================================
part                   parameters       formula
=====================  ===============  ======================================================================
vision tower           306,242,560      Conv3d 3x2x16x16 -> 1024 (+bias) + 2304 x 1024 positions + 24 blocks of
                                        (2 LayerNorms 2x1024, qkv 1024->3072, proj 1024->1024, MLP 1024->4096->1024,
                                        all with biases)
mergers                100,714,496      merger (LayerNorm 1024, 4096->4096, 4096->2048) + 3 deepstack mergers
                                        (LayerNorm 4096, the same two Linears)
text model (frozen)    1,116,542,976    151,936 x 2048 tied embedding + final RMSNorm 2048 + 16 layers of
                                        (q 2048->2048, k, v 2048->1024, o 2048->2048, no bias; q/k norms 128;
                                        gate, up 2048->6144, down 6144->2048; 2 RMSNorms)
vlln                   4,096            LayerNorm 2048
VL adapter             201,433,088      4 blocks of (2 LayerNorms 2048, q/k/v/out 2048->2048, FFN 2048->8192->2048,
                                        all with biases)
DiT (+ positions)      1,093,295,104    32 blocks of width 1536 (AdaLN 1536->3072, FFN 1536->6144->1536; odd blocks
                                        attend to themselves, even ones to 2048-wide VL tokens), timestep MLP
                                        256->1536->1536, proj_out 1536->3072 and 1536->1024; 1024 x 1536 positions
projectors             325,783,680      32 embodiments x (state 132->1024->1536, action W1 132->1536, W2 3072->1536,
                                        W3 1536->1536, decoder 1024->1024->132), each with a bias per slot
total / trainable      3,144,016,000 / 1,620,515,968 (vlln + adapter + DiT + projectors)
=====================  ===============  ======================================================================

The spec's rough figures (vision ~0.36 B, adapter ~0.2 B, DiT ~1.05 B, projectors ~0.3 B; ~3.1 B and
~1.6 B) agree except the vision tower, where the three deepstack mergers (76 M) come on top.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from autotune.cli import main
from autotune.workloads import get_workload
from autotune.workloads.gr00t_n17.llm import mrope_axes, mrope_positions
from autotune.workloads.gr00t_n17.presets import get_preset

W17 = get_workload("gr00t_n17")


def linear(d_in: int, d_out: int, bias: bool = True) -> int:
    return d_in * d_out + (d_out if bias else 0)


def reference_counts() -> dict[str, int]:
    """The table of the module docstring, from the architecture's numbers."""
    vit_block = (
        2 * 2 * 1024
        + linear(1024, 3072)
        + linear(1024, 1024)
        + linear(1024, 4096)
        + linear(4096, 1024)
    )
    merger = linear(4096, 4096) + linear(4096, 2048)
    text_layer = (linear(2048, 2048, False) + 2 * linear(2048, 1024, False) + linear(2048, 2048, False)
                  + 2 * 128 + 2 * linear(2048, 6144, False) + linear(6144, 2048, False) + 2 * 2048)  # fmt: skip
    adapter_block = 2 * 2 * 2048 + 4 * linear(2048, 2048) + linear(2048, 8192) + linear(8192, 2048)
    dit_common = linear(1536, 3072) + linear(1536, 6144) + linear(6144, 1536)
    dit_self = dit_common + 4 * linear(1536, 1536)
    dit_cross = dit_common + 2 * linear(1536, 1536) + 2 * linear(2048, 1536)
    slots = 32
    projectors = slots * (linear(132, 1024) + linear(1024, 1536) + linear(132, 1536) + linear(3072, 1536)
                          + linear(1536, 1536) + linear(1024, 1024) + linear(1024, 132))  # fmt: skip
    return {
        "vision": linear(3 * 2 * 16 * 16, 1024) + 2304 * 1024 + 24 * vit_block,
        "connector": 1024 * 2 + merger + 3 * (4096 * 2 + merger),
        "llm_frozen": 151_936 * 2048 + 2048 + 16 * text_layer,
        "vlln": 2 * 2048,
        "vl_adapter": 4 * adapter_block,
        "dit": 16 * (dit_self + dit_cross)
        + linear(256, 1536)
        + linear(1536, 1536)
        + linear(1536, 3072)
        + linear(1536, 1024)
        + 1024 * 1536,
        "projectors": projectors,
    }


def test_full_on_the_meta_device_matches_the_reference_counts_per_part():
    model = W17.build_model("full", "meta")
    regions = W17.regions(model)
    want = reference_counts()
    got = {n: sum(p.numel() for m in mods for p in m.parameters()) for n, mods in regions.items()}
    assert set(got) == set(want)
    for part, n in want.items():
        assert abs(got[part] - n) <= 0.01 * n, (part, got[part], n)
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert abs(total - 3_144_016_000) <= 0.01 * 3_144_016_000 and total == sum(got.values())
    assert trainable == sum(want[r] for r in ("vlln", "vl_adapter", "dit", "projectors"))


def test_the_stock_configuration_trains_what_upstream_fine_tunes():
    """Whole VLM frozen (tune_llm, tune_visual false, tune_top_llm_layers 0); vlln, the adapter, the
    DiT and the projectors train, as upstream's fine-tuning default."""
    model = W17.build_model("tiny", "meta")
    trains = {
        n: any(p.requires_grad for m in mods for p in m.parameters())
        for n, mods in W17.regions(model).items()
    }
    assert trains == {"vision": False, "connector": False, "llm_frozen": False, "vlln": True,
                      "vl_adapter": True, "dit": True, "projectors": True}  # fmt: skip
    cfg = W17.stock_config("full")
    assert (cfg.workload, cfg.precision.frozen_dtype, cfg.optimizer.lr, cfg.compile.regions) == (
        "gr00t_n17",
        "bf16",
        1e-4,
        [],
    )
    assert W17.resolve("full").action_horizon == 40 and W17.resolve("full").state_dim == 132


def _held_out_loss(model, batch) -> float:
    """The loss at fixed flow-matching draws (seeded), without dropout: comparable across steps."""
    model.eval()
    with torch.no_grad():
        torch.manual_seed(99)
        loss = sum(W17.loss(model, batch).item() for _ in range(3)) / 3
    model.train()
    return loss


def test_tiny_trains_with_a_falling_loss():
    torch.manual_seed(0)
    model = W17.build_model("tiny", "cpu")
    batch = W17.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(0))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    before = _held_out_loss(model, batch)
    for _ in range(12):
        loss = W17.loss(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert torch.isfinite(loss)
    assert _held_out_loss(model, batch) < 0.92 * before


def test_the_loss_split_at_the_frozen_backbone_is_the_loss():
    model = W17.build_model("tiny", "cpu").eval()  # no dropout: both sides draw the same noise
    batch = W17.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(1))
    split = W17.split_loss(model)
    torch.manual_seed(3)
    whole = W17.loss(model, batch)
    torch.manual_seed(3)
    assert torch.equal(split.rest(split.prefix(batch), batch), whole)
    assert split.regions == ("vision", "connector", "llm_frozen")


def test_mrope_positions_follow_qwen3_vl():
    """Text shares one position on all axes; an image's tokens take the next position on the time axis
    and add their row and column of the merged grid; the text after it resumes past the grid's larger side."""
    is_image = torch.tensor([[False, False, True, True, True, True, False, False]])
    t, h, w = mrope_positions(is_image, (2, 2))[:, 0].tolist()
    assert t == [0, 1, 2, 2, 2, 2, 4, 5]
    assert h == [0, 1, 2, 2, 3, 3, 4, 5]
    assert w == [0, 1, 2, 3, 2, 3, 4, 5]
    axes = mrope_axes((24, 20, 20)).tolist()  # interleaved: T H W T H W ... then T to the end
    assert axes[:6] == [0, 1, 2, 0, 1, 2] and axes[60:] == [0, 0, 0, 0] and len(axes) == 64


def test_the_patch_embedding_is_upstreams_conv3d_on_the_repeated_frame():
    """The replica's Linear on (channel, frame, row, column) patches, with the upstream Conv3d weight
    read through the name map's transform, computes the Conv3d over an image repeated in time."""
    from autotune.weights import load_name_map

    model = W17.build_model("tiny", "cpu")
    bound = load_name_map("gr00t_n17").bind(model)
    conv_w = torch.randn(64, 3, 2, 16, 16)
    conv_b = torch.randn(64)
    with torch.no_grad():
        model.vision.patch_embed.weight.copy_(
            bound.to_upstream["vision.patch_embed.weight"][1].to_replica(conv_w)
        )
        model.vision.patch_embed.bias.copy_(conv_b)
    pixels = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    ours = model.vision.patch_embed(model.vision.patches(pixels))
    x = (pixels.float() / 127.5 - 1.0).unsqueeze(2).expand(-1, -1, 2, -1, -1)
    ref = F.conv3d(x, conv_w, conv_b, stride=(2, 16, 16)).flatten(2).transpose(1, 2)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


def test_inspect_gives_counts_per_region_and_flops_per_sample(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    assert main(["inspect", "--workload", "gr00t_n17", "--preset", "full", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["params_total"] == sum(reference_counts().values())
    assert {n: r["params"] for n, r in info["regions"].items()} == reference_counts()
    assert sum(info["spec_modules"].values()) == info["params_total"]
    # the backbone is frozen: its backward is not run, so the backward is well under the forward
    assert 0 < info["flops_backward_per_sample"] < info["flops_forward_per_sample"]
    assert info["useful_flops_per_sample"] < info["flops_per_sample"]


@pytest.mark.parametrize("name", ["full", "medium", "tiny"])
def test_presets_keep_the_structure(name):
    p = get_preset(name)
    assert p.adapter_width == p.llm_hidden and len(p.deepstack_layers) == 3 - (name == "tiny")
    assert p.image_tokens_per_view * p.merge**2 == p.patch_grid[0] * p.patch_grid[1]


@pytest.mark.parametrize(
    "knobs",
    [
        {"skip_dead_work": True},
        {"category_matmul": "grouped"},
        {"attended_kv_only": True},
        {"gelu_epilogue": True},  # cuBLASLt's: a CPU step computes as before (GPU: test_gpu_knobs)
    ],
)
def test_each_model_knob_keeps_the_loss_and_every_gradient(knobs):
    """N1.7's declared model knobs (the ones every GR00T replica has) change how, never what."""
    from autotune.config import ModelConfig
    from autotune.workloads.gr00t_common.knobs import Gr00tHeadKnobs

    w = get_workload("gr00t_n17")
    batch = w.synthetic_batch("tiny", 4, "cpu", torch.Generator().manual_seed(1))

    def run(options):
        torch.manual_seed(0)
        model = w.build_model("tiny", "cpu")
        w.apply_model_options(model, ModelConfig(options=options))
        torch.manual_seed(3)  # the same noise, flow times and dropout
        loss = w.loss(model, batch)
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.requires_grad}

    ref_loss, ref = run(Gr00tHeadKnobs())
    loss, grads = run(Gr00tHeadKnobs(**knobs))
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for name in ref:
        torch.testing.assert_close(grads[name], ref[name], rtol=1e-4, atol=1e-6)


def test_the_gelu_epilogue_knob_reaches_every_vision_block():
    from autotune.config import ModelConfig
    from autotune.workloads.gr00t_common.knobs import Gr00tHeadKnobs

    w = get_workload("gr00t_n17")
    model = w.build_model("tiny", "cpu")
    assert not any(block.gelu_epilogue for block in model.vision.blocks)
    w.apply_model_options(model, ModelConfig(options=Gr00tHeadKnobs(gelu_epilogue=True)))
    assert all(block.gelu_epilogue for block in model.vision.blocks)
