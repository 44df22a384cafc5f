"""fp8 GEMMs of frozen linear layers with their weights quantized once (static weight scales).

torchao's float8 training (:func:`torchao.float8.convert_to_float8_training`) casts a layer's
weight to fp8 in every forward: an amax over the weight, its scale, a scaled copy. A frozen weight
is the same every step, so its cast is the same every step: :func:`freeze_fp8_weights` makes it
once, with torchao's own cast and the layer's own configuration (tensorwise scales, e4m3), and the
layer's forward hands the fp8 weight to torchao's matmul, which takes an argument already in fp8
as it is. Only the activations are scaled per step. The numerics are those of the training path:
the same fp8 weight, the same GEMM.

The fp8 copy is kept beside the layer's weight (which stays a parameter: saved, exported and
loaded as before) and not saved; :func:`refresh_fp8_weights` writes it again, in place (a graph
already captured or compiled reads its address), after weights are loaded into a built model.
"""

from __future__ import annotations

import torch
from torch import nn
from torchao.float8.float8_linear import Float8Linear, matmul_with_hp_or_float8_args
from torchao.float8.float8_scaling_utils import get_maybe_axiswise_dim, hp_tensor_to_float8_dynamic
from torchao.float8.float8_training_tensor import Float8TrainingTensor, GemmInputRole


class FrozenFloat8Linear(Float8Linear):
    """A :class:`Float8Linear` whose frozen weight is cast to fp8 once (``fp8_weight_t``)."""

    fp8_weight_t: Float8TrainingTensor

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
    def refresh(self) -> None:
        """Cast the weight again into the same fp8 memory (its values may have been loaded since)."""
        new = self.cast_weight()
        self.fp8_weight_t._data.copy_(new._data)
        self.fp8_weight_t._scale.copy_(new._scale)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        # as Float8Linear.forward, with the weight already in fp8
        if torch.is_autocast_enabled():
            input = input.to(torch.get_autocast_dtype("cuda"))
        out = matmul_with_hp_or_float8_args.apply(
            input, self.fp8_weight_t, self.linear_mm_config, self.config
        )
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out


def _frozen(layer: nn.Module) -> bool:
    return not any(p.requires_grad for p in layer.parameters())


def freeze_fp8_weights(modules: list[nn.Module]) -> int:
    """Give every fp8-converted layer of ``modules`` whose parameters are all frozen its fp8 weight,
    cast now; the number of layers given one. A layer that trains keeps the per-step cast (its
    weight changes with every update)."""
    count = 0
    for module in modules:
        for layer in module.modules():
            if type(layer) is Float8Linear and _frozen(layer):
                layer.__class__ = FrozenFloat8Linear
                layer.fp8_weight_t = layer.cast_weight()
                count += 1
    return count


def refresh_fp8_weights(model: nn.Module) -> None:
    """Cast the frozen fp8 layers' weights again, in place (after weights were loaded)."""
    for layer in model.modules():
        if isinstance(layer, FrozenFloat8Linear):
            layer.refresh()
