"""The GR00T N1.7 replica: Qwen3-VL backbone (vision, mergers, text), ``vlln``, the VL adapter, the
DiT action head and the projectors.

``Gr00tN17Model(preset, device)(batch)`` returns the flow-matching loss of the batch. The model is
built directly on ``device`` (``"meta"`` for counting), randomly initialised, every parameter fp32;
the whole vision-language model is frozen (upstream's ``tune_llm`` and ``tune_visual`` false,
``tune_top_llm_layers`` 0); ``vlln``, the adapter, the DiT and the projectors train. Its top-level
children are exactly the regions of the workload's region map. As built it computes what upstream
computes; :meth:`Gr00tN17Model.configure` changes how, never what.
"""

from __future__ import annotations

import torch
from torch import nn

from autotune.workloads.gr00t_common.head import FlowMatchingHead
from autotune.workloads.gr00t_common.layers import init_weights, prefix_grad_mode
from autotune.workloads.gr00t_common.projectors import CategorySpecificLinear
from autotune.workloads.gr00t_n17.adapter import VLAdapter
from autotune.workloads.gr00t_n17.llm import TextModel
from autotune.workloads.gr00t_n17.presets import Gr00tN17Preset
from autotune.workloads.gr00t_n17.vision import Mergers, VisionTower


class Gr00tN17Model(FlowMatchingHead):
    PREFIX_REGIONS = ("vision", "connector", "llm_frozen")
    """The regions :meth:`frozen_prefix` runs: the whole backbone, frozen."""

    def __init__(self, preset: Gr00tN17Preset, device: str | torch.device = "cpu") -> None:
        super().__init__()
        self.preset = preset
        self.state_dropout = preset.state_dropout
        with torch.device(device):
            self.vision = VisionTower(preset)
            self.connector = Mergers(preset)
            self.llm_frozen = TextModel(preset)
            self.vlln = nn.LayerNorm(preset.llm_hidden)
            self.vl_adapter = VLAdapter(preset)
            self.build_head(preset)
        if torch.device(device).type != "meta":
            # The backbone as HF initialises Qwen3-VL (normal, std 0.02); the adapter and the action
            # head keep PyTorch's default (fan-in scaled) initialisation, as diffusers' blocks do.
            for module in (self.vision, self.connector, self.llm_frozen):
                init_weights(module)
        for module in (self.vision, self.connector, self.llm_frozen):
            module.requires_grad_(False)
        self.skip_dead_work = False
        self.attended_kv_only = False
        self.frozen_prefix_no_grad = False

    def configure(self, *, skip_dead_work: bool = False, category_matmul: str = "gather",
                  attended_kv_only: bool = False, frozen_prefix_no_grad: bool = False,
                  gelu_epilogue: bool = False) -> None:  # fmt: skip
        """``skip_dead_work``: no LM-head logits and no action decoder on the state token, outputs the
        loss never reads. ``category_matmul``: how the projectors apply each sample's embodiment
        weights (:class:`CategorySpecificLinear`). ``attended_kv_only``: the DiT's cross-attention
        layers get only the VL tokens they attend to (``FlowMatchingHead.cross_contexts``).
        ``frozen_prefix_no_grad``: :meth:`frozen_prefix` with gradients off (the workload refuses it
        where a prefix region trains). ``gelu_epilogue``: the vision MLPs' ``linear_fc1`` bias and GELU
        in its GEMM's epilogue on CUDA (:class:`VisionBlock`). None changes the loss or a gradient
        beyond rounding."""
        self.skip_dead_work = skip_dead_work
        for block in self.vision.blocks:
            block.gelu_epilogue = gelu_epilogue
        self.frozen_prefix_no_grad = frozen_prefix_no_grad
        self.attended_kv_only = attended_kv_only
        self.llm_frozen.compute_logits = not skip_dead_work
        for module in self.projectors.modules():
            if isinstance(module, CategorySpecificLinear):
                module.matmul = category_matmul

    def region_map(self) -> dict[str, list[nn.Module]]:
        """Region name -> the callable modules it owns (the position embedding sits with the DiT)."""
        return {
            "vision": [self.vision],
            "connector": [self.connector],
            "llm_frozen": [self.llm_frozen],
            "vlln": [self.vlln],
            "vl_adapter": [self.vl_adapter],
            **self.head_regions(),
        }

    def frozen_prefix(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The backbone: vision -> mergers -> the text layers; the last layer's hidden states [B, L, 2048]
        before the final norm. It reads the batch's images and token ids and the backbone's weights."""
        images = batch["images"]
        B = images.shape[0]
        with prefix_grad_mode(self.frozen_prefix_no_grad):
            last, deep = self.vision(images.flatten(0, 1))
            tokens, deepstack = self.connector(last, deep)
            flat = [t.reshape(B, -1, self.preset.llm_hidden) for t in (tokens, *deepstack)]
            hidden, _logits = self.llm_frozen(batch["input_ids"], flat[0], flat[1:])
            return hidden

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.forward_from(self.frozen_prefix(batch), batch)

    def forward_from(self, hidden: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The loss from :meth:`frozen_prefix`'s hidden states: ``vlln``, the adapter, the
        flow-matching step through the DiT and the projectors."""
        return self.action_loss(self.vl_adapter(self.vlln(hidden)), batch)
