"""The upstream GR00T N1.7 state dict, spelled out here from the upstream module structure
(independently of the name map under test): every key and its shape for a preset.

``Gr00tN1d7`` (gr00t/model/gr00t_n1d7/gr00t_n1d7.py) holds ``backbone`` (Qwen3Backbone, whose ``model``
is transformers' Qwen3VLForConditionalGeneration: ``model.visual``, ``model.language_model``,
``lm_head``) and ``action_head`` (Gr00tN1d7ActionHead: ``vlln``, ``vl_self_attention``, ``model`` =
AlternateVLDiT, ``position_embedding``, ``state_encoder``, ``action_encoder``, ``action_decoder``).
"""

from __future__ import annotations

from autotune.workloads.gr00t_n17 import Gr00tN17Preset

VIS = "backbone.model.model.visual."
LM = "backbone.model.model.language_model."
DIT = "action_head.model."
VLSA = "action_head.vl_self_attention."


def _linear(s: dict, name: str, d_in: int, d_out: int, bias: bool = True) -> None:
    s[name + ".weight"] = (d_out, d_in)
    if bias:
        s[name + ".bias"] = (d_out,)


def _norm(s: dict, name: str, dim: int, bias: bool = True) -> None:
    s[name + ".weight"] = (dim,)
    if bias:
        s[name + ".bias"] = (dim,)


def _vision(p: Gr00tN17Preset) -> dict[str, tuple[int, ...]]:
    H, merged = p.vision_hidden, p.vision_hidden * p.merge**2
    s = {VIS + "patch_embed.proj.weight": (H, 3, p.temporal_patch, p.patch_size, p.patch_size),
         VIS + "patch_embed.proj.bias": (H,), VIS + "pos_embed.weight": (p.vision_pos_grid**2, H)}  # fmt: skip
    for i in range(p.vision_layers):
        b = f"{VIS}blocks.{i}."
        _norm(s, b + "norm1", H), _norm(s, b + "norm2", H)
        _linear(s, b + "attn.qkv", H, 3 * H), _linear(s, b + "attn.proj", H, H)
        (
            _linear(s, b + "mlp.linear_fc1", H, p.vision_mlp),
            _linear(s, b + "mlp.linear_fc2", p.vision_mlp, H),
        )
    mergers = [(VIS + "merger.", H)] + [
        (f"{VIS}deepstack_merger_list.{j}.", merged) for j in range(len(p.deepstack_layers))
    ]
    for prefix, norm_dim in mergers:
        _norm(s, prefix + "norm", norm_dim)
        (
            _linear(s, prefix + "linear_fc1", merged, merged),
            _linear(s, prefix + "linear_fc2", merged, p.llm_hidden),
        )
    return s


def _text(p: Gr00tN17Preset) -> dict[str, tuple[int, ...]]:
    L, hd = p.llm_hidden, p.llm_head_dim
    s = {LM + "embed_tokens.weight": (p.vocab_size, L), LM + "norm.weight": (L,)}
    for i in range(p.llm_layers):
        b = f"{LM}layers.{i}."
        (
            _norm(s, b + "input_layernorm", L, bias=False),
            _norm(s, b + "post_attention_layernorm", L, bias=False),
        )
        _linear(s, b + "self_attn.q_proj", L, p.llm_heads * hd, bias=False)
        _linear(s, b + "self_attn.k_proj", L, p.llm_kv_heads * hd, bias=False)
        _linear(s, b + "self_attn.v_proj", L, p.llm_kv_heads * hd, bias=False)
        _linear(s, b + "self_attn.o_proj", p.llm_heads * hd, L, bias=False)
        (
            _norm(s, b + "self_attn.q_norm", hd, bias=False),
            _norm(s, b + "self_attn.k_norm", hd, bias=False),
        )
        for proj in ("gate_proj", "up_proj"):
            _linear(s, f"{b}mlp.{proj}", L, p.llm_ffn, bias=False)
        _linear(s, b + "mlp.down_proj", p.llm_ffn, L, bias=False)
    return s


def _basic_block(s: dict, b: str, dim: int, kv: int, ffn: int, *, ada: bool) -> None:
    """diffusers-style BasicTransformerBlock: norm1 (AdaLayerNorm or LayerNorm), attn1, norm3 (affine
    unless ada_norm), ff.net.0.proj / ff.net.2."""
    if ada:
        _linear(s, b + "norm1.linear", dim, 2 * dim)
    else:
        _norm(s, b + "norm1", dim), _norm(s, b + "norm3", dim)
    _linear(s, b + "attn1.to_q", dim, dim)
    _linear(s, b + "attn1.to_k", kv, dim), _linear(s, b + "attn1.to_v", kv, dim)
    _linear(s, b + "attn1.to_out.0", dim, dim)
    _linear(s, b + "ff.net.0.proj", dim, ffn), _linear(s, b + "ff.net.2", ffn, dim)


def _action_head(p: Gr00tN17Preset) -> dict[str, tuple[int, ...]]:
    L, W, E = p.llm_hidden, p.dit_width, p.num_embodiments
    s: dict[str, tuple[int, ...]] = {}
    _norm(s, "action_head.vlln", L)
    for i in range(p.adapter_layers):
        _basic_block(s, f"{VLSA}transformer_blocks.{i}.", L, L, 4 * L, ada=False)
    s["action_head.position_embedding.weight"] = (p.max_positions, W)
    for i in range(p.dit_layers):  # odd blocks self-attend, even ones cross-attend to the VL tokens
        _basic_block(s, f"{DIT}transformer_blocks.{i}.", W, W if i % 2 else L, p.dit_ffn, ada=True)
    _linear(s, DIT + "timestep_encoder.timestep_embedder.linear_1", p.timestep_channels, W)
    _linear(s, DIT + "timestep_encoder.timestep_embedder.linear_2", W, W)
    _linear(s, DIT + "proj_out_1", W, 2 * W), _linear(s, DIT + "proj_out_2", W, p.dit_out)
    linears = {"state_encoder.layer1": (p.state_dim, p.state_hidden), "state_encoder.layer2": (p.state_hidden, W),
               "action_encoder.W1": (p.action_dim, W), "action_encoder.W2": (2 * W, W), "action_encoder.W3": (W, W),
               "action_decoder.layer1": (p.dit_out, p.decoder_hidden),
               "action_decoder.layer2": (p.decoder_hidden, p.action_dim)}  # fmt: skip
    for name, (
        d_in,
        d_out,
    ) in linears.items():  # CategorySpecificLinear: W [E, in, out], b [E, out]
        s[f"action_head.{name}.W"], s[f"action_head.{name}.b"] = (E, d_in, d_out), (E, d_out)
    return s


def upstream_shapes(p: Gr00tN17Preset) -> dict[str, tuple[int, ...]]:
    return {**_vision(p), **_text(p), **_action_head(p)}
