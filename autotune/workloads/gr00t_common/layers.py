"""Building blocks shared by the towers of the GR00T replicas."""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


def prefix_grad_mode(no_grad: bool) -> contextlib.AbstractContextManager:
    """The grad mode a model's frozen prefix runs in (knob ``model.frozen_prefix_no_grad``):
    gradients off, or as the caller has them. Both compose with torch.compile and CUDA-graph
    capture (``inference_mode`` would not: its tensors cannot be saved for the backward of the
    trainable layers that read the prefix's output)."""
    return torch.no_grad() if no_grad else contextlib.nullcontext()


def needs_gradient(layer: nn.Module, h: torch.Tensor) -> bool:
    """Whether autograd records ``layer(h)``: gradients on and its input or a parameter needs one."""
    return torch.is_grad_enabled() and (
        h.requires_grad or any(p.requires_grad for p in layer.parameters())
    )


def epilogue_takes(fc1: nn.Module, h: torch.Tensor) -> bool:
    """Whether ``gelu_tanh(fc1(h))`` can run as one cuBLASLt GEMM with its bias and GELU in the
    epilogue (knob ``model.gelu_epilogue``): ``fc1`` a plain ``nn.Linear`` (a layer converted to fp8
    keeps its own forward, which adds the bias after its GEMM), on CUDA (the epilogue is cuBLASLt's),
    and nothing needs ``fc1``'s gradient (a frozen tower's: the epilogue keeps no pre-activation
    for a GELU backward)."""
    return type(fc1) is nn.Linear and h.is_cuda and not needs_gradient(fc1, h)


def gelu_tanh_in_epilogue(fc1: nn.Linear, h: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(fc1(h)) as one cuBLASLt GEMM (``torch._addmm_activation``, which Inductor calls as
    it is), in the dtype autocast would give ``fc1``. The epilogue's GELU is the tanh approximation
    on CUDA, as the towers' MLPs use; it is applied to the fp32 sum before the bf16 rounding, one
    rounding less than a GEMM and a GELU of its own, and no pass of its own over the output."""
    dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else h.dtype
    w, b = fc1.weight.to(dtype), fc1.bias.to(dtype)
    out = torch._addmm_activation(b, h.to(dtype).reshape(-1, h.shape[-1]), w.t(), use_gelu=True)
    return out.reshape(*h.shape[:-1], w.shape[0])


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # In fp32, as Qwen3's RMSNorm computes it, whatever the activation dtype.
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps).to(x.dtype)


class FusedProjections(nn.Module):
    """Linear projections of one input (an attention's query, key and value) that can run as one GEMM.

    ``fuse`` (knob ``model.fused_frozen_qkv``) asks for it; :meth:`prepare` then copies the weights
    (and biases) side by side into buffers, once they have their final dtype, if every projection is a
    plain frozen ``nn.Linear`` (an fp8-converted or trainable one keeps the separate GEMMs). The
    projections are passed at each call rather than held, so a layer swapped in later (precision's fp8
    conversion) is the one that runs. The copies are not saved (the projections' own weights are) and
    refreshed by calling :meth:`prepare` again (``Session.weights_loaded``, after weights are loaded into
    a built session), in place, so that a graph already captured or compiled reads the new values.
    Each output element is the same dot product either way.
    """

    def __init__(self) -> None:
        super().__init__()
        self.fuse = False
        self.sizes: list[int] = []
        self.register_buffer("weight", None, persistent=False)
        self.register_buffer("bias", None, persistent=False)

    @torch.no_grad()
    def prepare(self, *projections: nn.Module) -> None:
        plain = all(
            type(p) is nn.Linear and not any(t.requires_grad for t in p.parameters())
            for p in projections
        )
        biases = {p.bias is not None for p in projections} if plain else set()
        if not (self.fuse and plain and len(biases) == 1):
            self.weight = self.bias = None
            return
        self.sizes = [p.out_features for p in projections]
        self.weight = _refill(self.weight, torch.cat([p.weight for p in projections]))
        self.bias = (
            _refill(self.bias, torch.cat([p.bias for p in projections]))
            if biases == {True}
            else None
        )

    def forward(self, x: torch.Tensor, *projections: nn.Module) -> tuple[torch.Tensor, ...]:
        if self.weight is None:
            return tuple(p(x) for p in projections)
        return F.linear(x, self.weight, self.bias).split(self.sizes, dim=-1)


def _refill(old: torch.Tensor | None, new: torch.Tensor) -> torch.Tensor:
    """``new``'s values in ``old``'s memory where it fits (its address may be captured), else ``new``."""
    if (
        old is not None
        and old.shape == new.shape
        and old.dtype == new.dtype
        and old.device == new.device
    ):
        return old.copy_(new)
    return new


class BlockStack(nn.Module):
    """A sequence of blocks that can be activation-checkpointed block by block.

    ``activation_checkpointing`` is switched by the training runner (knob ``checkpointing``);
    it only saves memory where the blocks have a backward (trainable regions).
    """

    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.activation_checkpointing = False

    def run(self, x: torch.Tensor, *args) -> torch.Tensor:
        for block in self.blocks:
            x = self.call(block, x, *args)
        return x

    def call(self, block: nn.Module, x: torch.Tensor, *args) -> torch.Tensor:
        """One block of the stack on ``x``, checkpointed where the stack is asked to be."""
        if self.activation_checkpointing and torch.is_grad_enabled():
            return checkpoint(block, x, *args, use_reentrant=False)
        return block(x, *args)


def sinusoidal(t: torch.Tensor, channels: int, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal features of (possibly batched) timesteps: ``t[..., None] * freqs`` -> [cos, sin]."""
    half = channels // 2
    freqs = torch.exp(
        -math.log(max_period) * torch.arange(half, device=t.device, dtype=torch.float32) / half
    )
    args = t.float()[..., None] * freqs
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """Random initialisation (the replica has no weights to load)."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)
