"""``hf_causal_lm``: a Hugging Face ``transformers`` Llama decoder trained on next-token prediction.

A template for your own Hugging Face model: build it from a config, name its regions (the
embedding, the decoder layers one by one, the final norm and LM head), call it with
``use_cache=False``, and return a dataset of dicts.

    python -m autotune run --workload hf_causal_lm                  # tiny on CPU, 0.5b on a GPU
    python -m autotune run --workload hf_causal_lm --preset 0.5b --time-budget 10m
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from autotune.config import DataConfig, OptimizerConfig, TrainConfig
from autotune.workloads.base import Batch, Workload
from autotune.workloads.hf_causal_lm.presets import PRESETS, LMPreset, get_preset
from autotune.workloads.hf_common import (
    build,
    linear_params,
    require_transformers,
    transformer_flops,
)


def llama_config(p: LMPreset):
    transformers = require_transformers()
    return transformers.LlamaConfig(
        vocab_size=p.vocab_size, hidden_size=p.hidden, intermediate_size=p.ffn, num_hidden_layers=p.layers,
        num_attention_heads=p.heads, num_key_value_heads=p.kv_heads, max_position_embeddings=p.seq_len,
        tie_word_embeddings=False, attn_implementation="sdpa", use_cache=False,
    )  # fmt: skip


class HFCausalLM(Workload):
    """``transformers.LlamaForCausalLM`` from a config, randomly initialised, every parameter trained."""

    name = "hf_causal_lm"
    presets = tuple(PRESETS)
    default_preset = "0.5b"
    cpu_preset = "tiny"
    data_fields = ("dataset",)

    def build_model(self, preset: str, device: str | torch.device = "cpu") -> nn.Module:
        return build(
            require_transformers().LlamaForCausalLM, llama_config(get_preset(preset)), device
        )

    def regions(self, model: nn.Module) -> dict[str, list[nn.Module]]:
        decoder = model.model
        return {
            "embed": [decoder.embed_tokens],
            "layers": list(decoder.layers),
            "head": [decoder.norm, model.lm_head],
        }

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return model(input_ids=batch["input_ids"], labels=batch["labels"], use_cache=False).loss

    def loss_weight(self, batch: Batch) -> torch.Tensor:
        """The loss is a mean over the predicted tokens (labels shifted by one, -100 ignored)."""
        return (batch["labels"][:, 1:] != -100).sum().to(torch.float32)

    def synthetic_batch(self, preset, batch_size, device, generator=None) -> Batch:
        p = get_preset(preset)
        ids = torch.randint(0, p.vocab_size, (batch_size, p.seq_len), generator=generator).to(
            device
        )
        return {"input_ids": ids, "labels": ids.clone()}

    def data_sources(self) -> tuple[str, ...]:
        return ("tokens", "synthetic")

    def dataset(
        self, preset: str, data: DataConfig, *, seed: int, rank: int = 0, world_size: int = 1
    ):
        from autotune.workloads.hf_causal_lm.data import TokenWindows, shard_folder

        p = get_preset(preset)
        return TokenWindows(shard_folder(p, data.dataset), p.seq_len, p.vocab_size)

    def optimizer_config(self, preset: str) -> OptimizerConfig:
        """A pretraining recipe: AdamW at 3e-4, betas (0.9, 0.95), decay 0.1, 1 % warm-up, cosine, clip 1."""
        return OptimizerConfig(
            lr=3e-4, betas=[0.9, 0.95], weight_decay=0.1, warmup_ratio=0.01, grad_clip=1.0
        )

    def stock_config(self, preset: str) -> TrainConfig:
        """What Hugging Face's ``Trainer`` runs with ``bf16=True``: bf16 autocast over fp32 weights, AdamW
        (torch's for-each kernels), the loader in the main process with pinned memory. ``tiny``, the CPU
        preset, runs in fp32 (``bf16=False``): a CPU without bf16 units emulates it, several times slower."""
        cfg = super().stock_config(preset)
        cfg.batch_size = get_preset(preset).batch_size
        cfg.precision.default = "fp32" if preset == "tiny" else "bf16"
        cfg.data.pin_memory = True
        return cfg

    def tokens_per_sample(self, preset: str) -> int:
        return get_preset(preset).seq_len

    @functools.cache  # noqa: B019  (the workload is a process-wide singleton)
    def flops_per_sample(self, preset: str) -> float:
        p = get_preset(preset)
        return transformer_flops(
            linear_params(self.build_model(preset, "meta")), p.layers, p.hidden, p.seq_len
        )
