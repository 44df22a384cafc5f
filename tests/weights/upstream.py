"""The upstream GR00T N1.6 state dict, spelled out here from the upstream source (independently of
the name map under test): every key and its shape for a preset, and a checkpoint of them on disk
in Hugging Face's sharded layout."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from autotune.workloads.gr00t_n16 import Gr00tPreset

VIT = "backbone.model.vision_model.vision_model."  # EagleBackbone.model -> Eagle3-VL .vision_model -> Siglip2VisionModel
LM = "backbone.model.language_model."  # Qwen3ForCausalLM
DIT = "action_head.model."  # AlternateVLDiT


def upstream_shapes(p: Gr00tPreset) -> dict[str, tuple[int, ...]]:
    H, M, L, W = p.vision_hidden, p.vision_mlp, p.llm_hidden, p.dit_width
    E, hd = p.num_embodiments, p.llm_head_dim
    s: dict[str, tuple[int, ...]] = {
        VIT + "embeddings.patch_embedding.weight": (H, 3 * p.patch_size**2),
        VIT + "embeddings.patch_embedding.bias": (H,),
        VIT + "embeddings.position_embedding.weight": (p.vision_pos_grid**2, H),
        VIT + "post_layernorm.weight": (H,),
        VIT + "post_layernorm.bias": (H,),
    }
    for i in range(p.vision_layers):
        layer = f"{VIT}encoder.layers.{i}."
        for norm in ("layer_norm1", "layer_norm2"):
            s[layer + norm + ".weight"] = s[layer + norm + ".bias"] = (H,)
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            s[f"{layer}self_attn.{proj}.weight"], s[f"{layer}self_attn.{proj}.bias"] = (H, H), (H,)
        s[layer + "mlp.fc1.weight"], s[layer + "mlp.fc1.bias"] = (M, H), (M,)
        s[layer + "mlp.fc2.weight"], s[layer + "mlp.fc2.bias"] = (H, M), (H,)
    unshuffled = H * p.unshuffle**2
    s |= {
        "backbone.model.mlp1.0.weight": (unshuffled,),
        "backbone.model.mlp1.0.bias": (unshuffled,),
        "backbone.model.mlp1.1.weight": (L, unshuffled),
        "backbone.model.mlp1.1.bias": (L,),
        "backbone.model.mlp1.3.weight": (L, L),
        "backbone.model.mlp1.3.bias": (L,),
        LM + "model.embed_tokens.weight": (p.vocab_size, L),
        LM + "model.norm.weight": (L,),
    }
    for i in range(p.llm_layers):
        layer = f"{LM}model.layers.{i}."
        s[layer + "input_layernorm.weight"] = s[layer + "post_attention_layernorm.weight"] = (L,)
        s[layer + "self_attn.q_proj.weight"] = (p.llm_heads * hd, L)
        s[layer + "self_attn.k_proj.weight"] = s[layer + "self_attn.v_proj.weight"] = (
            p.llm_kv_heads * hd,
            L,
        )
        s[layer + "self_attn.o_proj.weight"] = (L, p.llm_heads * hd)
        s[layer + "self_attn.q_norm.weight"] = s[layer + "self_attn.k_norm.weight"] = (hd,)
        s[layer + "mlp.gate_proj.weight"] = s[layer + "mlp.up_proj.weight"] = (p.llm_ffn, L)
        s[layer + "mlp.down_proj.weight"] = (L, p.llm_ffn)
    s |= {
        "action_head.vlln.weight": (L,),
        "action_head.vlln.bias": (L,),
        "action_head.position_embedding.weight": (p.max_positions, W),
    }
    for i in range(p.dit_layers):
        block, kv = (
            f"{DIT}transformer_blocks.{i}.",
            W if i % 2 == 1 else L,
        )  # odd blocks self-attend
        s[block + "norm1.linear.weight"], s[block + "norm1.linear.bias"] = (2 * W, W), (2 * W,)
        s[block + "attn1.to_q.weight"], s[block + "attn1.to_q.bias"] = (W, W), (W,)
        for proj in ("to_k", "to_v"):
            s[f"{block}attn1.{proj}.weight"], s[f"{block}attn1.{proj}.bias"] = (W, kv), (W,)
        s[block + "attn1.to_out.0.weight"], s[block + "attn1.to_out.0.bias"] = (W, W), (W,)
        s[block + "ff.net.0.proj.weight"], s[block + "ff.net.0.proj.bias"] = (
            (p.dit_ffn, W),
            (p.dit_ffn,),
        )
        s[block + "ff.net.2.weight"], s[block + "ff.net.2.bias"] = (W, p.dit_ffn), (W,)
    t = DIT + "timestep_encoder.timestep_embedder."
    s |= {
        t + "linear_1.weight": (W, p.timestep_channels),
        t + "linear_1.bias": (W,),
        t + "linear_2.weight": (W, W),
        t + "linear_2.bias": (W,),
        DIT + "proj_out_1.weight": (2 * W, W),
        DIT + "proj_out_1.bias": (2 * W,),
        DIT + "proj_out_2.weight": (p.dit_out, W),
        DIT + "proj_out_2.bias": (p.dit_out,),
    }
    linears = {
        "state_encoder.layer1": (p.state_dim, p.state_hidden),
        "state_encoder.layer2": (p.state_hidden, W),
        "action_encoder.W1": (p.action_dim, W),
        "action_encoder.W2": (2 * W, W),
        "action_encoder.W3": (W, W),
        "action_decoder.layer1": (p.dit_out, p.decoder_hidden),
        "action_decoder.layer2": (p.decoder_hidden, p.action_dim),
    }
    for name, (
        d_in,
        d_out,
    ) in linears.items():  # CategorySpecificLinear: W [E, in, out], b [E, out]
        s[f"action_head.{name}.W"], s[f"action_head.{name}.b"] = (E, d_in, d_out), (E, d_out)
    return s


def stored_in_bf16(key: str, p: Gr00tPreset) -> bool:
    """Upstream loads the backbone in bf16 and casts its trainable (top LLM) layers to fp32."""
    top = tuple(
        f"{LM}model.layers.{i}." for i in range(p.llm_layers - p.llm_trainable_layers, p.llm_layers)
    )
    return key.startswith("backbone.") and not key.startswith(top)


def write_upstream(
    folder: Path,
    p: Gr00tPreset,
    *,
    seed: int = 7,
    shards: int = 3,
    extra: dict[str, tuple[int, ...]] | None = None,
    drop: tuple[str, ...] = (),
    reshape: dict[str, tuple[int, ...]] | None = None,
) -> dict[str, torch.Tensor]:
    """A checkpoint of random tensors under the upstream keys (backbone in bf16, as upstream stores
    it), in ``shards`` files and an index; returns the tensors."""
    g = torch.Generator().manual_seed(seed)
    shapes = {**upstream_shapes(p), **(extra or {}), **(reshape or {})}
    tensors = {}
    for key, shape in shapes.items():
        if key in drop:
            continue
        t = torch.randn(shape, generator=g) * 0.02
        tensors[key] = t.to(torch.bfloat16) if stored_in_bf16(key, p) else t
    folder.mkdir(parents=True)
    keys = sorted(tensors)
    weight_map = {}
    for n in range(shards):
        name = f"model-{n + 1:05d}-of-{shards:05d}.safetensors"
        part = keys[n::shards]
        save_file({k: tensors[k] for k in part}, folder / name, metadata={"format": "pt"})
        weight_map |= {k: name for k in part}
    index = {
        "metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
        "weight_map": weight_map,
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "config.json").write_text(json.dumps({"model_type": "Gr00tN1d6"}))
    return tensors
