"""Workloads: the training jobs the tuner measures, looked up by name."""

from autotune.workloads.base import Batch, LossSplit, Workload
from autotune.workloads.registry import get_workload, list_workloads, register_workload

# Built-in workloads register themselves on import (the Hugging Face ones import transformers only
# when they build a model).
from autotune.workloads import gr00t_n16 as _gr00t_n16  # noqa: E402, F401  isort: skip
from autotune.workloads import gr00t_n17 as _gr00t_n17  # noqa: E402, F401  isort: skip
from autotune.workloads.hf_causal_lm import HFCausalLM  # noqa: E402  isort: skip
from autotune.workloads.image_classifier import ImageClassifier  # noqa: E402  isort: skip

register_workload(HFCausalLM())
register_workload(ImageClassifier())

__all__ = ["Batch", "LossSplit", "Workload", "get_workload", "list_workloads", "register_workload"]
