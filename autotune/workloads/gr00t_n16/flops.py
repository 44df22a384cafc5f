"""Counting the GR00T N1.6 replica by the rows of its spec's parameter table (``gr00t_common.flops``
counts the rest)."""

from __future__ import annotations

from autotune.workloads.gr00t_common.flops import numel


def spec_modules(model) -> dict[str, int]:
    """Parameter counts by the rows of the spec's parameter table."""
    llm_layers = list(model.llm_frozen.blocks) + list(model.llm_trainable.blocks)
    pr = model.projectors
    return {
        "siglip2": numel(model.vision.parameters()),
        "mlp1": numel(model.connector.parameters()),
        "qwen3_layers": numel(p for layer in llm_layers for p in layer.parameters()),
        "token_embedding_and_final_norm": numel(model.llm_frozen.embed_tokens.parameters())
        + numel(model.llm_trainable.norm.parameters()),
        "dit": numel(model.dit.parameters()),
        "state_encoder": numel(pr.state_encoder.parameters()),
        "action_encoder": numel(pr.action_encoder.parameters()),
        "action_decoder": numel(pr.action_decoder.parameters()),
        "position_embedding": numel(model.position_embedding.parameters()),
        "vlln": numel(model.vlln.parameters()),
    }
