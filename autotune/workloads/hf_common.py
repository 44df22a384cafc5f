"""What the Hugging Face workloads share: the optional import, model building, FLOPs and files made once."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from autotune.errors import WorkloadError


def require_transformers():
    """The ``transformers`` module, or one line saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise WorkloadError(
            "this workload needs Hugging Face transformers: pip install 'autotune[hf]'"
        ) from None
    return transformers


def build(model_cls, config, device: str | torch.device) -> nn.Module:
    """``model_cls(config)`` built directly on ``device`` (``meta`` for counting), fp32, randomly initialised."""
    config.dtype = torch.float32
    with torch.device(device):
        model = model_cls(config)
    return model.float() if torch.device(device).type != "meta" else model


def linear_params(model: nn.Module) -> int:
    """Weights of the model's linear layers: what every token multiplies (embedding lookups do not)."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))


def transformer_flops(linear: int, layers: int, hidden: int, tokens: int) -> float:
    """Forward and backward FLOPs of one sample of ``tokens`` tokens: 6 per linear weight and token, and
    the attention scores and their weighting (2 matmuls of tokens^2 x hidden a layer, x3 for the backward)."""
    return 6.0 * linear * tokens + 12.0 * layers * hidden * tokens**2


def make_once(folder: Path, make: Callable[[Path], None]) -> Path:
    """``folder``, made by ``make(tmp)`` into a temporary folder beside it and renamed into place,
    unless it exists: concurrent makers (ranks, trials) each write their own and one rename wins."""
    if folder.exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        make(tmp)
        with contextlib.suppress(OSError):  # another maker won the rename: its folder is the same
            os.rename(tmp, folder)
    finally:
        if tmp.exists():
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return folder
