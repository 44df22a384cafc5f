"""Configuration: the tree of training knobs and its strict YAML form."""

from autotune.config._strict import FieldError, check, check_choice, from_dict, to_dict
from autotune.config.io import config_from_dict, dump_config, load_config, read_yaml, save_config
from autotune.config.training import (
    SCHEMA_VERSION,
    CheckpointConfig,
    CompileConfig,
    DataConfig,
    DDPConfig,
    GraphConfig,
    KernelConfig,
    MemoryConfig,
    ModelConfig,
    OptimizerConfig,
    PrecisionConfig,
    TrainConfig,
)

__all__ = [
    "SCHEMA_VERSION",
    "CheckpointConfig",
    "CompileConfig",
    "DDPConfig",
    "DataConfig",
    "FieldError",
    "GraphConfig",
    "KernelConfig",
    "MemoryConfig",
    "ModelConfig",
    "OptimizerConfig",
    "PrecisionConfig",
    "TrainConfig",
    "check",
    "check_choice",
    "config_from_dict",
    "dump_config",
    "from_dict",
    "load_config",
    "read_yaml",
    "save_config",
    "to_dict",
]
