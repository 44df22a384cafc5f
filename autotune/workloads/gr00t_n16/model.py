"""The GR00T N1.6 replica: backbone (vision, connector, LLM), ``vlln``, DiT action head, projectors.

``Gr00tN16Model(preset, device)(batch)`` returns the flow-matching loss of the batch. The model
is built directly on ``device`` (``"meta"`` for counting), randomly initialised, every parameter
fp32, frozen parts (vision, connector, embeddings, lower LLM layers, final norm) not requiring
grad. Its top-level children are exactly the regions of the workload's region map. As built it
computes what upstream computes; :meth:`Gr00tN16Model.configure` changes how, never what.
"""

from __future__ import annotations

import torch
from torch import nn

from autotune.workloads.gr00t_common.head import FlowMatchingHead, sample_flow_times
from autotune.workloads.gr00t_common.layers import (
    FusedProjections,
    init_weights,
    prefix_grad_mode,
)
from autotune.workloads.gr00t_common.projectors import CategorySpecificLinear
from autotune.workloads.gr00t_n16.llm import LLMFrozen, LLMTrainable
from autotune.workloads.gr00t_n16.presets import Gr00tPreset
from autotune.workloads.gr00t_n16.vision import Connector, VisionTower

__all__ = ["Gr00tN16Model", "sample_flow_times"]


class Gr00tN16Model(FlowMatchingHead):
    def __init__(self, preset: Gr00tPreset, device: str | torch.device = "cpu") -> None:
        super().__init__()
        self.preset = preset
        with torch.device(device):
            self.vision = VisionTower(preset)
            self.connector = Connector(preset)
            self.llm_frozen = LLMFrozen(preset)
            self.llm_trainable = LLMTrainable(preset, self.llm_frozen.embed_tokens)
            self.vlln = nn.LayerNorm(preset.llm_hidden)
            self.build_head(preset)
        if torch.device(device).type != "meta":
            # The backbone as HF initialises Qwen3/SigLIP (normal, std 0.02); the action head
            # keeps PyTorch's default (fan-in scaled) initialisation, as diffusers' DiT does.
            for module in (self.vision, self.connector, self.llm_frozen, self.llm_trainable):
                init_weights(module)
        frozen = (self.vision, self.connector, self.llm_frozen, self.llm_trainable.norm)
        for module in frozen:
            module.requires_grad_(False)
        self.skip_dead_work = False
        self.attended_kv_only = False
        self.frozen_prefix_no_grad = False

    def configure(
        self,
        *,
        skip_dead_work: bool = False,
        category_matmul: str = "gather",
        bias_in_activation: bool = False,
        attended_kv_only: bool = False,
        gelu_epilogue: bool = False,
        fused_frozen_qkv: bool = False,
        frozen_prefix_no_grad: bool = False,
    ) -> None:
        """``skip_dead_work``: no LM-head logits and no action decoder on the state token, outputs
        the loss never reads (knob ``model.skip_dead_work``). ``category_matmul``: how the
        projectors apply each sample's embodiment weights (``gather`` or ``grouped``, see
        :class:`CategorySpecificLinear`). ``bias_in_activation``: the vision MLP's ``fc1`` bias added
        in its GELU, ``gelu_epilogue``: its bias and GELU in its GEMM's epilogue on CUDA (see
        :class:`SiglipLayer`). ``attended_kv_only``: the DiT's cross-attention layers
        get only the VL tokens they attend to (:meth:`cross_contexts`). ``fused_frozen_qkv``: frozen
        attention layers' q, k and v in one GEMM (:class:`FusedProjections`, made by
        :meth:`prepare_fused_projections`). ``frozen_prefix_no_grad``: :meth:`frozen_prefix` with
        gradients off (the workload refuses it where a prefix region trains). None changes the loss
        or a gradient beyond rounding."""
        self.skip_dead_work = skip_dead_work
        self.frozen_prefix_no_grad = frozen_prefix_no_grad
        self.attended_kv_only = attended_kv_only
        for layer in self.vision.blocks:
            layer.bias_in_activation, layer.gelu_epilogue = bias_in_activation, gelu_epilogue
        for module in self.modules():
            if isinstance(module, FusedProjections):
                module.fuse = fused_frozen_qkv
        self.llm_trainable.compute_logits = not skip_dead_work
        for module in self.projectors.modules():
            if isinstance(module, CategorySpecificLinear):
                module.matmul = category_matmul

    def prepare_fused_projections(self) -> None:
        """Copy the weights of the projections asked to fuse that are frozen (the others stay apart)."""
        for module in self.modules():
            if isinstance(getattr(module, "qkv", None), FusedProjections):
                module.qkv.prepare(module.q_proj, module.k_proj, module.v_proj)

    def region_map(self) -> dict[str, list[nn.Module]]:
        """Region name -> the callable modules it owns (the position embedding sits with the DiT)."""
        return {
            "vision": [self.vision],
            "connector": [self.connector],
            "llm_frozen": [self.llm_frozen],
            "llm_trainable": [self.llm_trainable],
            "vlln": [self.vlln],
            **self.head_regions(),
        }

    PREFIX_REGIONS = ("vision", "connector", "llm_frozen")
    """The regions :meth:`frozen_prefix` runs (frozen unless ``model.unfreeze`` names one)."""

    def frozen_prefix(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The first part of the forward: vision -> connector -> the frozen LLM layers; their hidden
        states [B, L, 2048]. It reads the batch's images and token ids and the prefix regions' weights."""
        images = batch["images"]
        with prefix_grad_mode(self.frozen_prefix_no_grad):
            feats = self.vision(images.flatten(0, 1))
            embeds = self.connector(feats).reshape(images.shape[0], -1, self.preset.llm_hidden)
            return self.llm_frozen(batch["input_ids"], embeds)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.forward_from(self.frozen_prefix(batch), batch)

    def forward_from(self, hidden: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The loss from :meth:`frozen_prefix`'s hidden states: the trained LLM layers, ``vlln``, the
        flow-matching step through the DiT and the projectors."""
        hidden, _logits = self.llm_trainable(hidden)
        return self.action_loss(self.vlln(hidden), batch)
