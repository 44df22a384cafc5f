"""The kernel knobs that act through a training process's environment."""

from __future__ import annotations

import pytest

from autotune.config import KernelConfig, TrainConfig, config_from_dict
from autotune.config.compat import Machine, check_machine
from autotune.errors import ConfigError, IncompatibleConfigError


def test_each_set_kernel_knob_names_its_variable_and_unset_ones_none():
    assert KernelConfig().environment() == {}
    assert KernelConfig(cuda_device_max_connections=8, cublaslt_workspace_kib=1).environment() == {
        "CUDA_DEVICE_MAX_CONNECTIONS": "8",
        "CUBLASLT_WORKSPACE_SIZE": "1",
    }


@pytest.mark.parametrize("value", [0, -4, 1 << 21])
def test_a_workspace_out_of_range_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match=rf"cublaslt_workspace_kib.*{value}.*\[1, 1048576\]"):
        config_from_dict({"kernels": {"cublaslt_workspace_kib": value}})


def test_the_workspace_knob_needs_a_cuda_device():
    cfg = config_from_dict({"kernels": {"cublaslt_workspace_kib": 1}})
    with pytest.raises(
        IncompatibleConfigError,
        match="kernels.cublaslt_workspace_kib: refused: CUBLASLT_WORKSPACE_SIZE",
    ):
        check_machine(cfg, Machine(cuda=False))
    check_machine(cfg, Machine(cuda=True, capability=(9, 0)))
    check_machine(TrainConfig(), Machine(cuda=False))


def test_a_trial_process_gets_the_kernel_knobs_variables_over_the_callers(monkeypatch):
    from autotune.train.trial.launch import training_env

    monkeypatch.delenv("CUBLASLT_WORKSPACE_SIZE", raising=False)
    cfg = config_from_dict({"kernels": {"cublaslt_workspace_kib": 1}})
    env = training_env(cfg, 1, {"CUBLASLT_WORKSPACE_SIZE": "4096", "X": "y"})
    assert env["CUBLASLT_WORKSPACE_SIZE"] == "1" and env["X"] == "y"
    assert "CUBLASLT_WORKSPACE_SIZE" not in training_env(TrainConfig(), 1)


def test_expandable_segments_joins_the_allocator_options_the_user_set():
    from autotune.config import MemoryConfig, TrainConfig
    from autotune.train.trial.launch import training_env

    on = MemoryConfig(expandable_segments=True)
    assert MemoryConfig().environment({}) == {}
    assert on.environment({}) == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    user = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}
    assert on.environment(user) == {
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64,expandable_segments:True"
    }
    assert on.environment({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}) == {}
    cfg = TrainConfig(preset="tiny")
    cfg.memory.expandable_segments = True
    env = training_env(cfg, 1, {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"})
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:64,expandable_segments:True"


def test_expandable_segments_reaches_a_trial_process_on_the_cpu(tmp_path):
    """A real trial process: the child's environment has the allocator option (CUDA reads it there)."""
    import subprocess
    import sys

    from autotune.config import TrainConfig
    from autotune.train.trial.launch import training_env

    cfg = TrainConfig(preset="tiny")
    cfg.memory.expandable_segments = True
    code = "import os; print(os.environ.get('PYTORCH_CUDA_ALLOC_CONF'))"
    out = subprocess.run(
        [sys.executable, "-c", code], env=training_env(cfg, 1), capture_output=True, text=True
    )
    assert out.stdout.strip() == "expandable_segments:True"
