"""Upstream checkpoints in and out: the Hugging Face safetensors layout (``hf``), the name map
between a workload's parameters and the upstream keys, kept as a table (``names``,
``<workload>.yaml``), and loading and writing a model through it (``load``)."""

from autotune.weights.hf import INDEX, fingerprint, read_layout, weight_files, write_checkpoint
from autotune.weights.load import LoadReport, check_fit, load_upstream, upstream_tensors
from autotune.weights.names import BoundMap, NameMap, load_name_map

__all__ = [
    "INDEX",
    "BoundMap",
    "LoadReport",
    "NameMap",
    "check_fit",
    "fingerprint",
    "load_name_map",
    "load_upstream",
    "read_layout",
    "upstream_tensors",
    "weight_files",
    "write_checkpoint",
]
