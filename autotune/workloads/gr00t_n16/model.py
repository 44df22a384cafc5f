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

from autotune.workloads.gr00t_n16.dit import DiT, attended
from autotune.workloads.gr00t_n16.layers import FusedProjections, init_weights
from autotune.workloads.gr00t_n16.llm import LLMFrozen, LLMTrainable
from autotune.workloads.gr00t_n16.presets import IMG_CONTEXT_ID, Gr00tPreset
from autotune.workloads.gr00t_n16.projectors import CategorySpecificLinear, Projectors
from autotune.workloads.gr00t_n16.vision import Connector, VisionTower

BETA_ALPHA = 1.5  # s ~ Beta(1.5, 1.0)
NOISE_S = 0.999


def sample_flow_times(batch_size: int, device) -> torch.Tensor:
    """t = (1 - s) * 0.999 with s ~ Beta(1.5, 1), drawn on ``device``.

    Beta(a, 1) has CDF s**a, so s = u**(1/a) with u ~ U(0, 1) is an exact sample; unlike
    ``torch.distributions.Beta`` it needs one ``rand`` kernel, no host round trip, and stays random
    inside a captured CUDA graph (the Philox offset advances on every replay).
    """
    s = torch.rand(batch_size, device=device) ** (1.0 / BETA_ALPHA)
    return (1.0 - s) * NOISE_S


class Gr00tN16Model(nn.Module):
    def __init__(self, preset: Gr00tPreset, device: str | torch.device = "cpu") -> None:
        super().__init__()
        self.preset = preset
        with torch.device(device):
            self.vision = VisionTower(preset)
            self.connector = Connector(preset)
            self.llm_frozen = LLMFrozen(preset)
            self.llm_trainable = LLMTrainable(preset, self.llm_frozen.embed_tokens)
            self.vlln = nn.LayerNorm(preset.llm_hidden)
            self.dit = DiT(preset)
            self.position_embedding = nn.Embedding(preset.max_positions, preset.dit_width)
            self.projectors = Projectors(preset)
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

    def configure(
        self,
        *,
        skip_dead_work: bool = False,
        category_matmul: str = "gather",
        bias_in_activation: bool = False,
        attended_kv_only: bool = False,
        gelu_epilogue: bool = False,
        fused_frozen_qkv: bool = False,
    ) -> None:
        """``skip_dead_work``: no LM-head logits and no action decoder on the state token, outputs
        the loss never reads (knob ``model.skip_dead_work``). ``category_matmul``: how the
        projectors apply each sample's embodiment weights (``gather`` or ``grouped``, see
        :class:`CategorySpecificLinear`). ``bias_in_activation``: the vision MLP's ``fc1`` bias added
        in its GELU, ``gelu_epilogue``: its bias and GELU in its GEMM's epilogue on CUDA (see
        :class:`SiglipLayer`). ``attended_kv_only``: the DiT's cross-attention layers
        get only the VL tokens they attend to (:meth:`cross_contexts`). ``fused_frozen_qkv``: frozen
        attention layers' q, k and v in one GEMM (:class:`FusedProjections`, made by
        :meth:`prepare_fused_projections`). None changes the loss or a gradient beyond rounding."""
        self.skip_dead_work = skip_dead_work
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
        pr = self.projectors
        return {
            "vision": [self.vision],
            "connector": [self.connector],
            "llm_frozen": [self.llm_frozen],
            "llm_trainable": [self.llm_trainable],
            "vlln": [self.vlln],
            "dit": [self.dit, self.position_embedding],
            "projectors": [pr.state_encoder, pr.action_encoder, pr.action_decoder],
        }

    def cross_contexts(self, vl: torch.Tensor, ids: torch.Tensor, attn: torch.Tensor):
        """(context, mask) of the DiT's text layers and of its image layers.

        Upstream: every VL token for both, the text layers masked to the real tokens that are not image
        context tokens, the image layers to the image context tokens. With ``attended_kv_only`` each
        gets only its tokens, so the keys and values of the tokens it masks are never projected: a
        sample has exactly ``views x image_tokens_per_view`` image context tokens, and so at most
        ``seq_len`` minus those of the others (``batch.layout_tokens``).
        """
        text_keep, image_keep = attn & (ids != IMG_CONTEXT_ID), ids == IMG_CONTEXT_ID
        if not self.attended_kv_only:
            return (vl, text_keep[:, None, None, :]), (vl, image_keep[:, None, None, :])
        images = self.preset.views * self.preset.image_tokens_per_view
        return attended(vl, text_keep, self.preset.seq_len - images), attended(
            vl, image_keep, images
        )

    PREFIX_REGIONS = ("vision", "connector", "llm_frozen")
    """The regions :meth:`frozen_prefix` runs (frozen unless ``model.unfreeze`` names one)."""

    def frozen_prefix(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The first part of the forward: vision -> connector -> the frozen LLM layers; their hidden
        states [B, L, 2048]. It reads the batch's images and token ids and the prefix regions' weights."""
        images = batch["images"]
        feats = self.vision(images.flatten(0, 1))
        image_embeds = self.connector(feats).reshape(images.shape[0], -1, self.preset.llm_hidden)
        return self.llm_frozen(batch["input_ids"], image_embeds)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.forward_from(self.frozen_prefix(batch), batch)

    def forward_from(self, hidden: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The loss from :meth:`frozen_prefix`'s hidden states: the trained LLM layers, ``vlln``, the
        flow-matching step through the DiT and the projectors."""
        p = self.preset
        hidden, _logits = self.llm_trainable(hidden)
        vl = self.vlln(hidden)
        text, image = self.cross_contexts(vl, batch["input_ids"], batch["attention_mask"])

        # Padding is zero upstream by construction; enforce it so padded values never leak in.
        mask = batch["action_mask"].to(torch.float32)
        action, cat_ids = batch["action"] * mask, batch["embodiment_id"]
        B = action.shape[0]
        t = sample_flow_times(B, action.device)[:, None, None]
        noise = torch.randn_like(action)
        x_t = (1 - t) * noise + t * action
        velocity = action - noise
        t_disc = (t[:, 0, 0] * 1000).floor()

        pr = self.projectors
        state_tokens = pr.state_encoder(batch["state"], cat_ids)
        action_tokens = pr.action_encoder(x_t, t_disc, cat_ids)
        pos = torch.arange(action_tokens.shape[1], device=action.device)
        action_tokens = action_tokens + self.position_embedding(pos).to(action_tokens.dtype)
        tokens = torch.cat([state_tokens, action_tokens], dim=1)
        out = self.dit(tokens, text, image, t_disc)
        if (
            self.skip_dead_work
        ):  # the decoder works token by token: decode only the action tokens the loss reads
            pred = pr.action_decoder(out[:, -p.action_horizon :], cat_ids)
        else:  # upstream decodes the state token too, and drops it
            pred = pr.action_decoder(out, cat_ids)[:, -p.action_horizon :]

        return ((pred.float() - velocity) ** 2 * mask).sum() / (mask.sum() + 1e-6)
