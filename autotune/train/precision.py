"""The precision map: per-region autocast and parameter dtypes, fp16 scaling, fp8 via torchao.

Each region's modules get their ``forward`` wrapped in the autocast context of the region's
precision; ``fp32`` regions run without autocast and cast floating inputs to fp32. Parameter
storage follows the region: fp32 regions keep fp32; autocast regions store frozen weights in
``frozen_dtype`` and trainable weights in ``trainable_dtype``. ``fp8`` converts the region's
linear layers with torchao's float8 training (bf16 autocast around the rest); a converted layer
whose parameters are all frozen has its weight cast to fp8 once, at this point, instead of in every
forward (:mod:`autotune.train.fp8_static`: the same fp8 weight, so the same numerics).
"""

from __future__ import annotations

import functools
import sys

import torch
from torch import nn
from torch.utils._pytree import tree_map_only

from autotune.config import PrecisionConfig
from autotune.errors import IncompatibleConfigError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast_dtype(precision: str) -> torch.dtype | None:
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}.get(precision)


def _cast(value, dtype: torch.dtype):
    """Floating tensors of ``value`` (nested in tuples, lists and dicts too) in ``dtype``."""
    return tree_map_only(torch.Tensor, lambda t: t.to(dtype) if t.is_floating_point() else t, value)


def _wrap_forward(
    module: nn.Module, device_type: str, dtype: torch.dtype | None, cache: bool
) -> None:
    forward = module.forward

    if dtype is None:

        @functools.wraps(forward)
        def fp32_forward(*args, **kwargs):
            args, kwargs = _cast((args, kwargs), torch.float32)
            with torch.autocast(device_type, enabled=False):
                return forward(*args, **kwargs)

        module.forward = fp32_forward
    else:

        @functools.wraps(forward)
        def autocast_forward(*args, **kwargs):
            # Inputs cross region boundaries in the region's dtype (an fp32 region may feed a bf16 one).
            args, kwargs = _cast((args, kwargs), dtype)
            with torch.autocast(device_type, dtype=dtype, cache_enabled=cache):
                return forward(*args, **kwargs)

        module.forward = autocast_forward


def set_param_dtypes(regions: dict[str, list[nn.Module]], cfg: PrecisionConfig) -> None:
    """Each region's parameters in its storage dtype. A parameter two regions share (tied input and
    output embeddings) stays fp32 when either region runs in fp32: an fp32 region runs without
    autocast, where a bf16 weight meets fp32 activations (``expected scalar type Float but found
    BFloat16``); an autocast region takes either."""
    owners: dict[int, tuple[nn.Parameter, set[str]]] = {}
    for name, modules in regions.items():
        for module in modules:
            for p in module.parameters(recurse=True):
                owners.setdefault(id(p), (p, set()))[1].add(cfg.of(name))
    for p, precisions in owners.values():
        if "fp32" in precisions or not p.is_floating_point():
            dtype = torch.float32 if p.is_floating_point() else p.dtype
        elif p.requires_grad:
            dtype = DTYPES[cfg.trainable_dtype]
        else:
            dtype = DTYPES[cfg.frozen_dtype]
        p.data = p.data.to(dtype)


def autocast_only_params(
    regions: dict[str, list[nn.Module]], cfg: PrecisionConfig
) -> list[nn.Parameter]:
    """The trainable fp32 parameters whose every use is a plain ``nn.Linear`` in a bf16 region.

    Autocast casts such a weight (and bias) to bf16 before the GEMM and its bf16 gradient back to
    fp32 after: stored in bf16 with an fp32 master in the optimizer, the forward and the gradient
    are the same numbers (``optimizer.impl: master``). Parameters of other modules stay out: an
    embedding or a norm computes with the fp32 value, and a weight gathered per sample
    (the projectors' slots) sums several samples' gradients, which in bf16 would round each sum.
    """
    uses: dict[int, tuple[nn.Parameter, list[bool]]] = {}
    for name, modules in regions.items():
        plain_bf16 = cfg.of(name) == "bf16"
        for module in modules:
            for sub in module.modules():
                linear = type(sub).forward is nn.Linear.forward
                for p in sub.parameters(recurse=False):
                    uses.setdefault(id(p), (p, []))[1].append(plain_bf16 and linear)
    return [
        p for p, ok in uses.values() if all(ok) and p.requires_grad and p.dtype == torch.float32
    ]


def apply_precision(
    regions: dict[str, list[nn.Module]], cfg: PrecisionConfig, device: torch.device, *, graphs: bool
) -> None:
    """Set parameter dtypes and wrap each region's modules in its autocast context."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = cfg.tf32
        torch.backends.cudnn.allow_tf32 = cfg.tf32
    set_param_dtypes(regions, cfg)
    for name, modules in regions.items():
        prec = cfg.of(name)
        if prec == "fp8":
            if name in cfg.regions:
                _check_fp8_takes(name, modules)
            _convert_fp8(modules, rowwise=cfg.fp8_frozen_scaling == "rowwise")
        for module in modules:
            # Autocast's weight cache must be off under graph capture (cached casts would be
            # captured once and then go stale as the optimizer updates the weights).
            _wrap_forward(module, device.type, autocast_dtype(prec), cache=not graphs)


def fp8_eligible(mod: nn.Module, fqn: str = "") -> bool:
    """Linear layers whose dimensions fp8 GEMMs take (multiples of 16), except those a workload marks
    ``few_rows`` (applied to one row per sample: the weight's scaling would cost more than the GEMM)."""
    return (
        type(mod) is nn.Linear  # not a layer converted already (torchao's are nn.Linear too)
        and mod.in_features % 16 == 0
        and mod.out_features % 16 == 0
        and not getattr(mod, "few_rows", False)
    )


def _check_fp8_takes(name: str, modules: list[nn.Module]) -> None:
    """Refuse fp8 named for a region none of whose layers it converts: it would run in bf16."""
    if not any(fp8_eligible(m) for module in modules for m in module.modules()):
        raise IncompatibleConfigError(
            f"precision.regions.{name}: refused: region {name!r} has no linear layer fp8 takes "
            "(widths multiples of 16), so it would run in bf16; allowed: bf16 or fp32 for it"
        )


def _convert_fp8(modules: list[nn.Module], rowwise: bool = False) -> None:
    """Convert the eligible linear layers of ``modules`` to fp8 (after their parameters have their
    dtype and trainability: a frozen layer's weight is cast to fp8 here, once, by rows where
    ``rowwise``: ``precision.fp8_frozen_scaling``)."""
    from autotune.train.fp8_static import freeze_fp8_weights

    for module in modules:
        convert_fp8_layers(module)
    freeze_fp8_weights(modules, rowwise=rowwise)


def convert_fp8_layers(module: nn.Module) -> None:
    """torchao's fp8 training layers (tensorwise scales) in place of ``module``'s eligible linear
    layers. A layer that trains pads its GEMMs' inner dimension to a multiple of 16: its weight
    gradient's inner dimension is the number of rows (batch × tokens), which fp8 GEMMs need so
    aligned and the batch decides; a frozen layer computes no weight gradient and is not padded
    (the pad copies the operand even where nothing is added)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    def trains(mod: nn.Module, fqn: str) -> bool:
        return fp8_eligible(mod) and any(p.requires_grad for p in mod.parameters())

    padded = Float8LinearConfig(pad_inner_dim=True)
    convert_to_float8_training(module, module_filter_fn=trains, config=padded)
    convert_to_float8_training(module, module_filter_fn=fp8_eligible)


def refresh_frozen_fp8(model: nn.Module) -> None:
    """Cast the frozen fp8 layers' weights again, in place, after weights were loaded into them."""
    static = sys.modules.get("autotune.train.fp8_static")  # not imported: no fp8 layer to refresh
    if static is not None:
        static.refresh_fp8_weights(model)


def needs_scaler(cfg: PrecisionConfig) -> bool:
    return cfg.uses("fp16")
