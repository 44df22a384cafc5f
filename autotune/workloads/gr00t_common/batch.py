"""The batch of the GR00T workloads (N1.6, N1.7): what the data path yields and the model consumes.

Keys, shapes and dtypes (B samples, V = preset.views, L = preset.seq_len, (H, W) = preset.image_shape;
fitted to a dataset by each workload's ``fit.py``):

==================  =====================  ========  ==============================================
key                 shape                  dtype     meaning
==================  =====================  ========  ==============================================
``images``          [B, V, 3, H, W]        uint8     augmented camera frames (normalised on device)
``input_ids``       [B, L]                 int64     text tokens, then per view <img> ctx*N </img>,
                                                     right-padded with PAD_ID
``attention_mask``  [B, L]                 bool      True on real tokens
``state``           [B, 1, state_dim]      float32   normalised state, zero-padded to state_dim
``action``          [B, horizon, act_dim]  float32   normalised action chunk, zero-padded
``action_mask``     [B, horizon, act_dim]  bool      True on real (step, dim) entries
``embodiment_id``   [B]                    int64     projector slot in [0, num_embodiments)
==================  =====================  ========  ==============================================

The image context tokens (``IMG_CONTEXT_ID``) are where the vision features replace the
token embeddings, in view order; each view has exactly ``preset.image_tokens_per_view`` of them.
"""

from __future__ import annotations

import torch

from autotune.workloads.gr00t_common.shape import (
    IMG_CONTEXT_ID,
    IMG_END_ID,
    IMG_START_ID,
    NUM_SPECIAL_TOKENS,
    PAD_ID,
    Gr00tSizes,
)

BATCH_KEYS = (
    "images",
    "input_ids",
    "attention_mask",
    "state",
    "action",
    "action_mask",
    "embodiment_id",
)


def layout_tokens(text_ids: list[int], preset: Gr00tSizes) -> tuple[list[int], int]:
    """Text then, per view, ``<img>`` + context tokens + ``</img>``; returns (ids, real length).

    Text longer than the room the images leave is truncated; the result is padded to seq_len.
    """
    text_ids = list(text_ids)[: preset.max_text_tokens]
    ids = list(text_ids)
    for _ in range(preset.views):
        ids += [IMG_START_ID] + [IMG_CONTEXT_ID] * preset.image_tokens_per_view + [IMG_END_ID]
    n = len(ids)
    return ids + [PAD_ID] * (preset.seq_len - n), n


def synthetic_batch(
    preset: Gr00tSizes, batch_size: int, device, generator: torch.Generator | None = None
) -> dict:
    """Random batch of the real shapes (text lengths, action lengths and embodiments vary)."""
    g = generator
    B, V, (H, W) = batch_size, preset.views, preset.image_shape
    images = torch.randint(0, 256, (B, V, 3, H, W), generator=g, dtype=torch.uint8)
    input_ids = torch.full((B, preset.seq_len), PAD_ID, dtype=torch.long)
    attention_mask = torch.zeros(B, preset.seq_len, dtype=torch.bool)
    vocab_hi = preset.vocab_size
    for b in range(B):
        n_text = int(torch.randint(4, preset.max_text_tokens + 1, (1,), generator=g))
        text = torch.randint(NUM_SPECIAL_TOKENS, vocab_hi, (n_text,), generator=g).tolist()
        ids, n = layout_tokens(text, preset)
        input_ids[b] = torch.tensor(ids)
        attention_mask[b, :n] = True
    state = torch.zeros(B, 1, preset.state_dim)
    action = torch.zeros(B, preset.action_horizon, preset.action_dim)
    action_mask = torch.zeros(B, preset.action_horizon, preset.action_dim, dtype=torch.bool)
    for b in range(B):
        sd = int(torch.randint(6, 33, (1,), generator=g))
        ad = int(torch.randint(6, 33, (1,), generator=g))
        steps = int(torch.randint(16, preset.action_horizon + 1, (1,), generator=g))
        state[b, 0, :sd] = torch.rand(sd, generator=g) * 2 - 1
        action[b, :steps, :ad] = torch.rand(steps, ad, generator=g) * 2 - 1
        action_mask[b, :steps, :ad] = True
    embodiment_id = torch.randint(0, preset.num_embodiments, (B,), generator=g)
    batch = {
        "images": images,
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "state": state,
        "action": action,
        "action_mask": action_mask,
        "embodiment_id": embodiment_id,
    }
    return {k: v.to(device) for k, v in batch.items()}
