"""A model's weights from, and to, an upstream checkpoint through the workload's name map.

``load_upstream(model, folder, workload)`` checks the whole checkpoint first (every parameter's key
present, and once: not also under an aliased prefix; no key the map does not know, every shape as
the model needs it, every dtype a floating point one: an integer or boolean tensor cast to the
parameter's dtype would be other weights) and raises one ``ConfigError`` line naming what does not
fit before any tensor is copied; then it copies each tensor into its parameter in place (cast to
the parameter's dtype), so that graphs, compiled modules and optimizers built on the parameters
keep working, and refuses the checkpoint (a ``DataError`` naming the keys) where a parameter then
holds a NaN or an infinity.
``upstream_tensors(model, workload)`` is the inverse: the model's parameters under the upstream
keys, in the upstream layout.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from autotune.errors import NAME_CHARS, ConfigError, DataError, listed, short_repr
from autotune.weights.hf import TensorInfo, read_layout, read_tensors
from autotune.weights.names import BoundMap, load_name_map


@dataclass(frozen=True)
class LoadReport:
    folder: str
    loaded: int
    """Parameters set from the checkpoint (all of the model's)."""
    ignored: dict[str, str] = field(default_factory=dict)
    """Upstream keys the replica has no module for -> why they are left out."""


def _shapes_mismatch(
    bound: BoundMap, params: dict[str, nn.Parameter], infos: dict[str, TensorInfo]
) -> list[tuple[str, str]]:
    bad = []
    for name, (key, transform) in bound.to_upstream.items():
        info = infos.get(key)
        if info is None:
            continue
        want = tuple(transform.to_upstream(torch.empty(params[name].shape, device="meta")).shape)
        if info.shape != want:
            bad.append((key, f"is {list(info.shape)}, the model needs {list(want)}"))
    return bad


FLOATING = frozenset({"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"})
"""safetensors' names of the dtypes a weight is cast from as it is (an 8-bit one without scales)."""


def _not_floating(keys: list[str], infos: dict[str, TensorInfo]) -> list[tuple[str, str]]:
    return [
        (k, f"is {infos[k].dtype}") for k in keys if k in infos and infos[k].dtype not in FLOATING
    ]


def _by_canonical_key(
    bound: BoundMap, raw: dict[str, TensorInfo]
) -> tuple[dict[str, TensorInfo], list[tuple[str, str]]]:
    """The checkpoint's tensors by the key the map writes, and each key it holds under both an
    aliased and the written spelling (one parameter, two tensors: neither may win silently)."""
    infos: dict[str, TensorInfo] = {}
    twice = []
    for k, info in raw.items():
        key = bound.canonical(k)
        if key in infos:
            twice.append((key, f"and {short_repr(infos[key].key if k == key else k, NAME_CHARS)}"))
        infos[key] = info
    return infos, twice


def check_fit(
    model: nn.Module, folder: str | os.PathLike, workload: str, preset: str | None = None
) -> tuple[BoundMap, dict[str, TensorInfo], dict[str, str]]:
    """(bound map, the checkpoint's tensors by canonical key, ignored keys) or one ConfigError line."""
    bound = load_name_map(workload).bind(model)
    infos, twice = _by_canonical_key(bound, read_layout(folder))
    params = dict(model.named_parameters())
    missing = [key for key, _ in bound.to_upstream.values() if key not in infos]
    ignored = {k: why for k in infos if k not in bound.to_replica and (why := bound.why_ignored(k))}
    unexpected = [k for k in infos if k not in bound.to_replica and k not in ignored]
    misshapen = _shapes_mismatch(bound, params, infos)
    not_floating = _not_floating([key for key, _ in bound.to_upstream.values()], infos)
    problems = [
        listed(what, items)
        for what, items in (
            ("keys held twice, under two spellings", twice),
            ("missing keys", missing),
            ("unexpected keys", unexpected),
            ("misshapen keys", misshapen),
            ("keys of a dtype that is not floating point", not_floating),
        )
        if items
    ]
    if problems:
        target = f"preset {preset} of {workload}" if preset else workload
        raise ConfigError(f"{folder}: does not fit {target}: " + "; ".join(problems))
    return bound, infos, ignored


@torch.no_grad()
def load_upstream(
    model: nn.Module,
    folder: str | os.PathLike,
    workload: str,
    preset: str | None = None,
    *,
    masters: dict[str, torch.Tensor] | None = None,
) -> LoadReport:
    """Set every parameter of ``model`` from the upstream checkpoint in ``folder`` (see the module);
    ``masters``: fp32 copies of some parameters by name (a training session's ``optimizer.impl:
    master`` stores those parameters in bf16), set from the checkpoint at its precision too."""
    bound, infos, ignored = check_fit(model, folder, workload, preset)
    params = dict(model.named_parameters())
    masters = masters or {}
    keys = [key for key, _ in bound.to_upstream.values()]
    read, finite = [], []
    for key, tensor in read_tensors(infos, keys):
        name = bound.to_replica[key]
        value = bound.to_upstream[name][1].to_replica(tensor)
        params[name].copy_(value)
        if name in masters:
            masters[name].copy_(value)
        read.append(key)
        finite.append(torch.isfinite(params[name]).all())  # on the device: one sync below
    bad = [key for key, ok in zip(read, torch.stack(finite).tolist() if finite else []) if not ok]
    if bad:
        raise DataError(
            f"{folder}: "
            + listed("keys hold NaN or infinite values", bad)
            + " (in the file, or past the range of the parameter's dtype); the model would train on them"
        )
    return LoadReport(str(Path(folder)), len(keys), ignored)


@torch.no_grad()
def upstream_tensors(model: nn.Module, workload: str) -> dict[str, torch.Tensor]:
    """Every parameter of ``model`` under its upstream key and in the upstream layout, on the CPU,
    in the dtype the model stores it in."""
    bound = load_name_map(workload).bind(model)
    out = {}
    for name, p in model.named_parameters():
        key, transform = bound.to_upstream[name]
        out[key] = transform.to_upstream(p.detach().to("cpu"))
    return out
