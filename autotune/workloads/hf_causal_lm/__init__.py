"""A Hugging Face transformers causal language model (Llama, built from a config): needs ``autotune[hf]``."""

from autotune.workloads.hf_causal_lm.workload import HFCausalLM

__all__ = ["HFCausalLM"]
