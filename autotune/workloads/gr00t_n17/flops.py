"""Counting the GR00T N1.7 replica by the parts of its spec (``gr00t_common.flops`` counts the rest)."""

from __future__ import annotations

from autotune.workloads.gr00t_common.flops import numel


def spec_modules(model) -> dict[str, int]:
    """Parameter counts by the parts of ``nvidia/GR00T-N1.7-3B``."""
    v, t, pr = model.vision, model.llm_frozen, model.projectors
    return {
        "vision_patch_and_position_embedding": numel(v.patch_embed.parameters()) + numel(v.pos_embed.parameters()),
        "vision_blocks": numel(v.blocks.parameters()),
        "merger": numel(model.connector.merger.parameters()),
        "deepstack_mergers": numel(model.connector.deepstack.parameters()),
        "text_layers": numel(t.blocks.parameters()),
        "token_embedding_and_final_norm": numel(t.embed_tokens.parameters()) + numel(t.norm.parameters()),
        "vlln": numel(model.vlln.parameters()),
        "vl_self_attention": numel(model.vl_adapter.parameters()),
        "dit": numel(model.dit.parameters()),
        "position_embedding": numel(model.position_embedding.parameters()),
        "state_encoder": numel(pr.state_encoder.parameters()),
        "action_encoder": numel(pr.action_encoder.parameters()),
        "action_decoder": numel(pr.action_decoder.parameters()),
    }  # fmt: skip
