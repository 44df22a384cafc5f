"""The flow-matching action head GR00T N1.6 and N1.7 share: DiT, position embedding, projectors.

A model mixes in :class:`FlowMatchingHead`, builds the parts with :meth:`build_head` and turns its
VL tokens into the loss with :meth:`action_loss`. The step follows upstream's action head
(``Gr00tN1d6ActionHead`` / ``Gr00tN1d7ActionHead``): t = (1 - s) * 0.999 with s ~ Beta(1.5, 1),
x_t = (1 - t) noise + t action, the DiT predicts the velocity action - noise from the state token
and the noised action tokens, and the loss is the masked mean squared error.
"""

from __future__ import annotations

import torch
from torch import nn

from autotune.workloads.gr00t_common.dit import DiT, attended
from autotune.workloads.gr00t_common.projectors import Projectors
from autotune.workloads.gr00t_common.shape import IMG_CONTEXT_ID, Gr00tSizes

BETA_ALPHA = 1.5  # s ~ Beta(1.5, 1.0)
NOISE_S = 0.999
TIMESTEP_BUCKETS = 1000


def sample_flow_times(batch_size: int, device) -> torch.Tensor:
    """t = (1 - s) * 0.999 with s ~ Beta(1.5, 1), drawn on ``device``.

    Beta(a, 1) has CDF s**a, so s = u**(1/a) with u ~ U(0, 1) is an exact sample; unlike
    ``torch.distributions.Beta`` it needs one ``rand`` kernel, no host round trip, and stays random
    inside a captured CUDA graph (the Philox offset advances on every replay).
    """
    s = torch.rand(batch_size, device=device) ** (1.0 / BETA_ALPHA)
    return (1.0 - s) * NOISE_S


class FlowMatchingHead(nn.Module):
    """The action head's modules and step, on top of a model's VL tokens (see the module)."""

    preset: Gr00tSizes
    skip_dead_work: bool = False
    attended_kv_only: bool = False
    state_dropout: float = 0.0
    """Probability that a sample's state token is zeroed in training (upstream's ``state_dropout_prob``)."""

    def build_head(self, preset: Gr00tSizes) -> None:
        """The head's modules, as top-level children: ``dit``, ``position_embedding``, ``projectors``."""
        self.dit = DiT(preset)
        self.position_embedding = nn.Embedding(preset.max_positions, preset.dit_width)
        self.projectors = Projectors(preset)

    def head_regions(self) -> dict[str, list[nn.Module]]:
        """The head's regions (the position embedding sits with the DiT)."""
        pr = self.projectors
        return {
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

    def action_loss(self, vl: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The flow-matching loss of ``batch`` given its VL tokens ``vl`` [B, L, llm_hidden]."""
        p = self.preset
        text, image = self.cross_contexts(vl, batch["input_ids"], batch["attention_mask"])
        # Padding is zero upstream by construction; enforce it so padded values never leak in.
        mask = batch["action_mask"].to(torch.float32)
        action, cat_ids = batch["action"] * mask, batch["embodiment_id"]
        B = action.shape[0]
        t = sample_flow_times(B, action.device)[:, None, None]
        noise = torch.randn_like(action)
        x_t = (1 - t) * noise + t * action
        velocity = action - noise
        t_disc = (t[:, 0, 0] * TIMESTEP_BUCKETS).floor()

        pr = self.projectors
        state_tokens = self._dropped(pr.state_encoder(batch["state"], cat_ids))
        action_tokens = pr.action_encoder(x_t, t_disc, cat_ids)
        pos = torch.arange(action_tokens.shape[1], device=action.device)
        action_tokens = action_tokens + self.position_embedding(pos).to(action_tokens.dtype)
        tokens = torch.cat([state_tokens, action_tokens], dim=1)
        out = self.dit(tokens, text, image, t_disc)
        if (
            self.skip_dead_work
        ):  # the decoder works token by token: decode only those the loss reads
            pred = pr.action_decoder(out[:, -p.action_horizon :], cat_ids)
        else:  # upstream decodes the state token too, and drops it
            pred = pr.action_decoder(out, cat_ids)[:, -p.action_horizon :]
        return ((pred.float() - velocity) ** 2 * mask).sum() / (mask.sum() + 1e-6)

    def _dropped(self, state_tokens: torch.Tensor) -> torch.Tensor:
        """Upstream's state dropout: in training, each sample's state token zeroed with probability
        ``state_dropout`` (drawn on the device, no host sync)."""
        if not (self.training and self.state_dropout > 0):
            return state_tokens
        keep = torch.rand(state_tokens.shape[0], device=state_tokens.device) >= self.state_dropout
        return state_tokens * keep[:, None, None].to(state_tokens.dtype)
