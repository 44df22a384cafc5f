"""fp8 GEMMs of frozen linear layers with their weights quantized once (static weight scales).

torchao's float8 training (:func:`torchao.float8.convert_to_float8_training`) casts a layer's
weight to fp8 in every forward: an amax over the weight, its scale, a scaled copy. A frozen weight
is the same every step, so its cast is the same every step: :func:`freeze_fp8_weights` makes it
once, with torchao's own cast and the layer's own configuration (tensorwise scales, e4m3), and the
layer's forward hands the fp8 weight to torchao's matmul, which takes an argument already in fp8
as it is. Only the activations are scaled per step. The numerics are those of the training path:
the same fp8 weight, the same GEMM. A call that needs no gradient for its input (a frozen prefix's)
runs torchao's forward as plain tensor operations, which AOTAutograd's cache takes (torchao's own
path makes a compiled graph uncacheable: see :mod:`autotune.train.compile_cache`).

``rowwise`` (knob ``precision.fp8_frozen_scaling``) scales by rows instead: each activation row by
its own amax, each output channel of the weight by its own (cast once), and ``_scaled_mm`` scales
the product's rows and columns back. A row's amax and its cast are one pass over the row (the
tensorwise amax is a reduction over the whole activation before any element can be cast), and an
outlier token or channel costs only its own row's precision. Not the tensorwise numbers: the
parity check decides. A rowwise layer's call whose input needs a gradient runs in bf16 with the
layer's weight (no fp8 backward is kept for a frozen layer).

The fp8 copy is kept beside the layer's weight (which stays a parameter: saved, exported and
loaded as before) and not saved; :func:`refresh_fp8_weights` writes it again, in place (a graph
already captured or compiled reads its address), after weights are loaded into a built model.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torchao.float8.config import ScalingGranularity, ScalingType
from torchao.float8.float8_linear import Float8Linear, matmul_with_hp_or_float8_args
from torchao.float8.float8_scaling_utils import get_maybe_axiswise_dim, hp_tensor_to_float8_dynamic
from torchao.float8.float8_training_tensor import Float8TrainingTensor, GemmInputRole
from torchao.float8.float8_utils import EPS, _round_scale_down_to_power_of_2


class FrozenFloat8Linear(Float8Linear):
    """A :class:`Float8Linear` whose frozen weight is cast to fp8 once (``fp8_weight_t``, or
    ``rowwise_weight_t`` with its inverse scales ``rowwise_inv_scale`` where it scales by rows)."""

    fp8_weight_t: Float8TrainingTensor | None
    rowwise_weight_t: torch.Tensor
    rowwise_inv_scale: torch.Tensor
    _plain: bool = False
    _rowwise: bool = False

    @torch.no_grad()
    def cast_weight(self) -> Float8TrainingTensor:
        """The transposed weight in fp8, cast exactly as :class:`Float8Linear`'s forward casts it."""
        c = self.config
        w = c.cast_config_weight
        return hp_tensor_to_float8_dynamic(
            self.weight.t(),
            w.target_dtype,
            self.linear_mm_config,
            gemm_input_role=GemmInputRole.WEIGHT,
            scaling_granularity=w.scaling_granularity,
            axiswise_dim=get_maybe_axiswise_dim(0, w.scaling_granularity),
            round_scales_to_power_of_2=c.round_scales_to_power_of_2,
        )

    @torch.no_grad()
    def cast_weight_rowwise(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The transposed weight in fp8 with a scale per output channel (a power of 2, so the cast
        only moves exponents), column-major as ``_scaled_mm`` takes it; and the inverse scales [1, N]."""
        data, scale = self._rows_to_fp8(self.weight)
        return data.t(), scale.reciprocal().reshape(1, -1).contiguous()

    @torch.no_grad()
    def refresh(self) -> None:
        """Cast the weight again into the same fp8 memory (its values may have been loaded since)."""
        if self._rowwise:
            data, inv = self.cast_weight_rowwise()
            self.rowwise_weight_t.copy_(data)
            self.rowwise_inv_scale.copy_(inv)
            return
        new = self.cast_weight()
        self.fp8_weight_t._data.copy_(new._data)
        self.fp8_weight_t._scale.copy_(new._scale)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if torch.is_autocast_enabled():
            input = input.to(torch.get_autocast_dtype("cuda"))
        needs_grad = input.requires_grad and torch.is_grad_enabled()
        if self._rowwise:
            out = (
                nn.functional.linear(input, self.weight.to(input.dtype))
                if needs_grad
                else self._rowwise_forward(input)
            )
        elif self._plain and not needs_grad:
            out = self._plain_forward(input)
        else:
            # as Float8Linear.forward, with the weight already in fp8: the input's gradient flows
            # through torchao's matmul
            out = matmul_with_hp_or_float8_args.apply(
                input, self.fp8_weight_t, self.linear_mm_config, self.config
            )
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out

    def _plain_forward(self, input: torch.Tensor) -> torch.Tensor:
        """torchao's forward GEMM (input cast with a tensorwise dynamic scale, ``_scaled_mm`` with
        the inverse scales) in plain tensor operations. torchao's own path builds its config
        records and a tensor subclass in the traced graph and calls an ``allow_in_graph``
        function, which AOTAutograd's cache refuses: a compiled graph of these layers is then
        traced and partitioned again by every process. This one is cached like any other graph;
        it serves the calls that need no input gradient (a frozen prefix's)."""
        amax = torch.max(torch.abs(input)).to(torch.float64)
        scale = (self._fp8_max / torch.clamp(amax, min=EPS)).to(torch.float32)
        if self._pow2_scales:
            scale = _round_scale_down_to_power_of_2(scale)
        scaled = input.to(torch.float32) * scale
        a = scaled.clamp(min=-self._fp8_max, max=self._fp8_max).to(self._fp8_dtype)
        a = a.reshape(-1, a.shape[-1])
        # torchao calls _scaled_mm below autocast (from its tensor subclass's dispatch). A CPU
        # autocast region rounds a scaled _scaled_mm otherwise, so it is left there; CUDA's leaves
        # the call as it is (the GPU tests compare the two paths bit for bit), and its compiled
        # graph stays free of autocast regions
        cpu_autocast = torch.is_autocast_enabled("cpu")
        with torch.autocast("cpu", enabled=False) if cpu_autocast else contextlib.nullcontext():
            out = torch._scaled_mm(
                a,
                self.fp8_weight_t._data,
                scale_a=scale.reciprocal(),
                scale_b=self.fp8_weight_t._scale.reciprocal(),
                out_dtype=input.dtype,
                use_fast_accum=self._fast_accum,
            )
        return out.reshape(*input.shape[:-1], out.shape[-1])

    def _rowwise_forward(self, input: torch.Tensor) -> torch.Tensor:
        """The GEMM with a scale per activation row (each row's amax and cast, one pass over it) and
        per output channel of the weight."""
        a, scale = self._rows_to_fp8(input.reshape(-1, input.shape[-1]))
        out = torch._scaled_mm(
            a,
            self.rowwise_weight_t,
            scale_a=scale.reciprocal(),
            scale_b=self.rowwise_inv_scale,
            out_dtype=input.dtype,
            use_fast_accum=self._fast_accum,
        )
        return out.reshape(*input.shape[:-1], out.shape[-1])

    def _rows_to_fp8(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``t`` [rows, k] in fp8, each row scaled by its own power of 2 (its amax to fp8's largest
        value); and those scales [rows, 1]."""
        scale = _pow2_scale(torch.amax(torch.abs(t), dim=1, keepdim=True), self._fp8_max)
        data = (t.to(torch.float32) * scale).clamp(-self._fp8_max, self._fp8_max)
        return data.to(self._fp8_dtype), scale

    def take_rowwise(self) -> None:
        """Scale by rows (after :meth:`take_plain_path` read the configuration): the rowwise fp8
        weight is cast now and the tensorwise one dropped (nothing calls it any more)."""
        self.rowwise_weight_t, self.rowwise_inv_scale = self.cast_weight_rowwise()
        self.fp8_weight_t = None
        self._rowwise = True

    def take_plain_path(self) -> None:
        """Read, once, what the plain forward needs of the layer's configuration, and use it where
        the configuration is the one it implements (tensorwise dynamic scales, real fp8 GEMMs, no
        padding); any other keeps torchao's path for every call."""
        c = self.config
        cast = c.cast_config_input
        mm = self.linear_mm_config.output
        self._plain = (
            cast.scaling_type is ScalingType.DYNAMIC
            and cast.scaling_granularity is ScalingGranularity.TENSORWISE
            and c.cast_config_weight.scaling_granularity is ScalingGranularity.TENSORWISE
            and not mm.emulate
            and not mm.pad_inner_dim
            and self.fp8_weight_t._data.stride(0) == 1  # column-major, as _scaled_mm takes it
        )
        self._fp8_dtype = cast.target_dtype
        self._fp8_max = float(torch.finfo(cast.target_dtype).max)
        self._pow2_scales = bool(c.round_scales_to_power_of_2)
        self._fast_accum = bool(mm.use_fast_accum)


def _pow2_scale(amax: torch.Tensor, fp8_max: float) -> torch.Tensor:
    """fp8's largest value over ``amax`` (fp32; tiny amaxes held at torchao's EPS), rounded down to a
    power of 2, as torchao's rowwise recipe takes its scales."""
    scale = (fp8_max / torch.clamp(amax.to(torch.float64), min=EPS)).to(torch.float32)
    return _round_scale_down_to_power_of_2(scale)


def _frozen(layer: nn.Module) -> bool:
    return not any(p.requires_grad for p in layer.parameters())


def freeze_fp8_weights(modules: list[nn.Module], rowwise: bool = False) -> int:
    """Give every fp8-converted layer of ``modules`` whose parameters are all frozen its fp8 weight,
    cast now (by rows where ``rowwise`` and the layer runs real fp8 GEMMs); the number of layers given
    one. A layer that trains keeps the per-step cast (its weight changes with every update)."""
    count = 0
    for module in modules:
        for layer in module.modules():
            if type(layer) is Float8Linear and _frozen(layer):
                layer.__class__ = FrozenFloat8Linear
                layer.fp8_weight_t = layer.cast_weight()
                layer.take_plain_path()
                if rowwise and not layer.linear_mm_config.output.emulate:
                    layer.take_rowwise()
                count += 1
    return count


def refresh_fp8_weights(model: nn.Module) -> None:
    """Cast the frozen fp8 layers' weights again, in place (after weights were loaded)."""
    for layer in model.modules():
        if isinstance(layer, FrozenFloat8Linear):
            layer.refresh()
