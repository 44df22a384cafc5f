"""Reorderings between the replica's layout of a tensor and the upstream checkpoint's.

Each transform is a pair of exact permutations (no arithmetic, so a round trip is bit-exact):
``to_upstream`` takes the replica's tensor to the layout the upstream model reads, ``to_replica``
inverts it. The name maps (``gr00t_n16.yaml``, ``gr00t_n17.yaml``) name them per row, with their
arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from autotune.errors import ConfigError, short_repr


def _patch_to_upstream(w: torch.Tensor, channels: int) -> torch.Tensor:
    """Linear weight [out, C*s*s] on (channel, row, column) patches -> on (row, column, channel)."""
    s = int(round((w.shape[1] // channels) ** 0.5))
    return (
        w.reshape(w.shape[0], channels, s, s)
        .permute(0, 2, 3, 1)
        .reshape(w.shape[0], -1)
        .contiguous()
    )


def _patch_to_replica(w: torch.Tensor, channels: int) -> torch.Tensor:
    s = int(round((w.shape[1] // channels) ** 0.5))
    return (
        w.reshape(w.shape[0], s, s, channels)
        .permute(0, 3, 1, 2)
        .reshape(w.shape[0], -1)
        .contiguous()
    )


def _unshuffle_to_upstream(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Along the last dim: offset-major (offset*D + c, the replica's unshuffle) -> channel-major
    (c*groups + offset, ``F.pixel_unshuffle``'s)."""
    lead = x.shape[:-1]
    return x.reshape(*lead, groups, -1).transpose(-1, -2).reshape(*lead, -1).contiguous()


def _unshuffle_to_replica(x: torch.Tensor, groups: int) -> torch.Tensor:
    lead = x.shape[:-1]
    return x.reshape(*lead, -1, groups).transpose(-1, -2).reshape(*lead, -1).contiguous()


def _swap_time_features(w: torch.Tensor) -> torch.Tensor:
    """Weight [slots, 2w, w] of W2 on cat(actions, time features): the time features' two halves
    swapped (the replica's sinusoid is cat(cos, sin), upstream's cat(sin, cos)). Its own inverse."""
    width = w.shape[1] // 2
    half = width // 2
    a, cos_rows, sin_rows = w[:, :width], w[:, width : width + half], w[:, width + half :]
    return torch.cat([a, sin_rows, cos_rows], dim=1).contiguous()


def _linear_to_conv(w: torch.Tensor, kernel: list[int]) -> torch.Tensor:
    """Linear weight [out, prod(kernel)] on patches flattened in the kernel's order -> the convolution's
    weight [out, *kernel] (a convolution with stride = kernel is that GEMM on each patch)."""
    return w.reshape(w.shape[0], *kernel).contiguous()


def _conv_to_linear(w: torch.Tensor) -> torch.Tensor:
    return w.reshape(w.shape[0], -1).contiguous()


@dataclass(frozen=True)
class Transform:
    name: str
    to_upstream: Callable[[torch.Tensor], torch.Tensor]
    to_replica: Callable[[torch.Tensor], torch.Tensor]


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


IDENTITY = Transform("identity", _identity, _identity)

_FACTORIES: dict[str, Callable[..., Transform]] = {
    "patch_channels_last": lambda channels: Transform(
        "patch_channels_last",
        lambda w: _patch_to_upstream(w, channels),
        lambda w: _patch_to_replica(w, channels),
    ),
    "unshuffle_channels": lambda groups: Transform(
        "unshuffle_channels",
        lambda x: _unshuffle_to_upstream(x, groups),
        lambda x: _unshuffle_to_replica(x, groups),
    ),
    "conv_kernel": lambda kernel: Transform(
        "conv_kernel", lambda w: _linear_to_conv(w, kernel), _conv_to_linear
    ),
    "swap_time_features": lambda: Transform(
        "swap_time_features", _swap_time_features, _swap_time_features
    ),
}


def make_transform(spec: dict[str, Any] | None, where: str) -> Transform:
    """The transform a name-map row names (``{name: ..., **arguments}``), or the identity."""
    if not spec:
        return IDENTITY
    args = dict(spec)
    name = args.pop("name", None)
    if name not in _FACTORIES:
        raise ConfigError(
            f"{where}: transform {short_repr(name)} is not one of {sorted(_FACTORIES)}"
        )
    try:
        return _FACTORIES[name](**args)
    except TypeError as exc:
        raise ConfigError(f"{where}: transform {name!r}: {exc}") from None
