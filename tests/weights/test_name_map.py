"""The name map against the upstream state dict as the upstream source spells it, and its
reorderings against what the upstream modules compute."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from autotune.weights import load_name_map
from autotune.weights.transforms import make_transform
from autotune.workloads import get_workload
from autotune.workloads.gr00t_common.projectors import ActionEncoder
from autotune.workloads.gr00t_n16 import get_preset
from autotune.workloads.gr00t_n16.vision import Connector, VisionTower
from tests.weights.upstream import upstream_shapes


@pytest.mark.parametrize("preset", ["tiny", "medium", "full"])
def test_every_parameter_maps_to_the_upstream_key_set_exactly(preset):
    model = get_workload("gr00t_n16").build_model(preset, "meta")
    bound = load_name_map("gr00t_n16").bind(model)
    mapped = {key for key, _ in bound.to_upstream.values()}
    assert mapped == set(upstream_shapes(get_preset(preset)))
    assert len(bound.to_replica) == sum(1 for _ in model.parameters())


def test_the_upstream_names_of_the_issue_are_the_ones_written():
    model = get_workload("gr00t_n16").build_model("full", "meta")
    bound = load_name_map("gr00t_n16").bind(model)
    assert (
        bound.to_upstream["dit.blocks.5.attn1.to_q.weight"][0]
        == "action_head.model.transformer_blocks.5.attn1.to_q.weight"
    )
    # the top LLM layers continue the lower ones' numbering upstream
    assert (
        bound.to_upstream["llm_trainable.blocks.0.gate_proj.weight"][0]
        == "backbone.model.language_model.model.layers.12.mlp.gate_proj.weight"
    )
    assert bound.canonical("backbone.eagle_model.mlp1.0.weight") == "backbone.model.mlp1.0.weight"
    assert bound.why_ignored("backbone.model.language_model.lm_head.weight")
    assert bound.why_ignored("backbone.model.vision_model.vision_model.head.probe")


@pytest.mark.parametrize(
    "name", ["patch_channels_last", "unshuffle_channels", "swap_time_features"]
)
def test_transforms_are_exact_permutations(name):
    args = {"patch_channels_last": {"channels": 3}, "unshuffle_channels": {"groups": 4}}.get(
        name, {}
    )
    t = make_transform({"name": name, **args}, "test")
    x = {
        "patch_channels_last": torch.randn(5, 3 * 14 * 14),
        "unshuffle_channels": torch.randn(6, 4 * 8),
        "swap_time_features": torch.randn(2, 16, 8),
    }[name]
    up = t.to_upstream(x)
    assert sorted(up.flatten().tolist()) == sorted(x.flatten().tolist())
    assert torch.equal(t.to_replica(up), x)


def test_patch_embedding_computes_what_upstream_computes_with_the_upstream_weight():
    p = get_preset("tiny")
    torch.manual_seed(0)
    tower = VisionTower(p)
    pixels = torch.randint(0, 256, (2, 3, p.image_size, p.image_size), dtype=torch.uint8)
    seen = {}
    tower.patch_embedding.register_forward_hook(lambda m, a, out: seen.setdefault("out", out))
    tower(pixels)
    weight = make_transform({"name": "patch_channels_last", "channels": 3}, "t").to_upstream(
        tower.patch_embedding.weight
    )
    # modeling_siglip2.py convert_images_to_patches: (B, C, nh, p, nw, p) -> (B, nh, nw, p, p, C)
    x, s = pixels.float() / 127.5 - 1.0, p.patch_size
    n = p.image_size // s
    patches = x.reshape(2, 3, n, s, n, s).permute(0, 2, 4, 3, 5, 1).reshape(2, n * n, -1)
    assert torch.allclose(patches @ weight.T + tower.patch_embedding.bias, seen["out"], atol=1e-5)


def test_connector_computes_what_mlp1_computes_on_pixel_unshuffle():
    p = get_preset("tiny")
    torch.manual_seed(0)
    conn = Connector(p)
    with torch.no_grad():
        conn.norm.weight.normal_()
        conn.norm.bias.normal_()
    (gh, gw), d = p.patch_grid, p.vision_hidden
    feats = torch.randn(2, gh * gw, d)
    t = make_transform({"name": "unshuffle_channels", "groups": 4}, "t")
    # modeling_eagle3_vl.py pixel_shuffle_back: [C, h, w] per image, F.pixel_unshuffle, then mlp1
    grid = feats.transpose(1, 2).reshape(2, d, gh, gw)
    x = F.pixel_unshuffle(grid, 2).flatten(2).transpose(1, 2)
    x = F.layer_norm(
        x, (x.shape[-1],), t.to_upstream(conn.norm.weight), t.to_upstream(conn.norm.bias)
    )
    x = F.linear(
        F.gelu(F.linear(x, t.to_upstream(conn.fc1.weight), conn.fc1.bias)),
        conn.fc2.weight,
        conn.fc2.bias,
    )
    assert torch.allclose(x, conn(feats), atol=1e-5)


def test_action_encoder_computes_what_upstream_computes_with_sin_then_cos():
    p = get_preset("tiny")
    torch.manual_seed(0)
    enc = ActionEncoder(p)
    actions, t, ids = (
        torch.randn(2, 5, p.action_dim),
        torch.tensor([3.0, 700.0]),
        torch.tensor([0, 4]),
    )
    w2 = make_transform({"name": "swap_time_features"}, "t").to_upstream(enc.W2.W)
    # embodiment_conditioned_mlp.py: SinusoidalPositionalEncoding is cat(sin, cos); x = swish(W2(cat(W1 a, tau)))
    half = p.dit_width // 2
    freqs = torch.exp(-torch.arange(half) * (math.log(10000.0) / half))
    args = t[:, None, None].expand(2, 5, 1) * freqs
    tau = torch.cat([torch.sin(args), torch.cos(args)], dim=-1)
    a = torch.bmm(actions, enc.W1.W[ids]) + enc.W1.b[ids][:, None]
    x = torch.bmm(torch.cat([a, tau], -1), w2[ids]) + enc.W2.b[ids][:, None]
    x = torch.bmm(x * torch.sigmoid(x), enc.W3.W[ids]) + enc.W3.b[ids][:, None]
    assert torch.allclose(x, enc(actions, t, ids), atol=1e-5)
