"""Text tokenisation and image augmentation, on their own."""

from __future__ import annotations

import colorsys

import pytest
import torch

from autotune.data.augment import AugmentSpec, adjust_hue, augment, hsv_to_rgb, rgb_to_hsv
from autotune.data.text import normalize_text
from autotune.workloads.gr00t_common.text import WordTokenizer
from autotune.workloads.gr00t_n16.presets import NUM_SPECIAL_TOKENS, UNK_ID


def test_normalize_lowercases_and_strips_punctuation():
    assert normalize_text("Put the Bowl's lid, on the PLATE!") == [
        "put",
        "the",
        "bowls",
        "lid",
        "on",
        "the",
        "plate",
    ]


def test_word_ids_start_after_specials_and_fold_into_the_vocabulary():
    tok = WordTokenizer.build(["Open the drawer.", "Close the drawer"])
    assert sorted(tok.vocab.values()) == list(range(NUM_SPECIAL_TOKENS, NUM_SPECIAL_TOKENS + 4))
    assert tok.encode("OPEN the door", vocab_size=1000) == [
        tok.vocab["open"],
        tok.vocab["the"],
        UNK_ID,
    ]
    folded = tok.encode("the open close drawer", vocab_size=NUM_SPECIAL_TOKENS + 2)
    assert all(NUM_SPECIAL_TOKENS <= i < NUM_SPECIAL_TOKENS + 2 for i in folded)


def test_tokenizer_round_trips_through_json(tmp_path):
    tok = WordTokenizer.build(["Stack the red mug."])
    tok.save(tmp_path / "t.json")
    assert WordTokenizer.load(tmp_path / "t.json").vocab == tok.vocab


def frames(views: int = 2, size: int | tuple[int, int] = 64, seed: int = 0) -> torch.Tensor:
    h, w = (size, size) if isinstance(size, int) else size
    return torch.randint(
        0, 256, (views, 3, h, w), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8
    )


@pytest.mark.parametrize(
    "size, short, out",
    [(64, 64, (56, 56)), (256, 256, (252, 252)), (80, 64, (56, 56)), ((480, 640), 256, (252, 336))],
)
def test_augment_shapes(size, short, out):
    x = augment(
        frames(size=size), AugmentSpec(out, short_edge=short), torch.Generator().manual_seed(0)
    )
    assert x.shape == (2, 3, *out) and x.dtype == torch.uint8


def test_augment_is_a_function_of_the_generator_and_replays_across_views():
    spec = AugmentSpec((56, 56), short_edge=64)
    same_views = frames(views=1).expand(2, -1, -1, -1)
    a = augment(same_views, spec, torch.Generator().manual_seed(5))
    b = augment(same_views, spec, torch.Generator().manual_seed(5))
    c = augment(same_views, spec, torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(a[0], a[1])  # one crop window and one jitter for all views of a sample


def test_hsv_matches_colorsys_and_round_trips():
    x = torch.rand(1, 3, 6, 6, generator=torch.Generator().manual_seed(1))
    hsv = rgb_to_hsv(x)
    for i, j in [(0, 0), (2, 3), (5, 5)]:
        ref = colorsys.rgb_to_hsv(*x[0, :, i, j].tolist())
        assert hsv[0, :, i, j].tolist() == pytest.approx(ref, abs=1e-5)
    assert torch.allclose(hsv_to_rgb(hsv), x, atol=1e-5)
    shifted = adjust_hue(x, 0.1)[0, :, 2, 3].tolist()
    h, s, v = colorsys.rgb_to_hsv(*x[0, :, 2, 3].tolist())
    assert shifted == pytest.approx(colorsys.hsv_to_rgb((h + 0.1) % 1, s, v), abs=1e-5)


# The textbook formulas, one tensor expression each: the loader's hue rotation is a faster
# arrangement of the same float operations, so it must give these bits exactly.
def _reference_rgb_to_hsv(x: torch.Tensor) -> torch.Tensor:
    r, g, b = x.unbind(-3)
    maxc, minc = x.max(dim=-3).values, x.min(dim=-3).values
    delta = maxc - minc
    s = torch.where(maxc > 0, delta / maxc.clamp_min(1e-12), torch.zeros_like(maxc))
    d = delta.clamp_min(1e-12)
    rc, gc, bc = (maxc - r) / d, (maxc - g) / d, (maxc - b) / d
    h = torch.where(maxc == r, bc - gc, torch.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
    h = torch.where(delta > 0, (h / 6.0) % 1.0, torch.zeros_like(h))
    return torch.stack((h, s, maxc), dim=-3)


def _reference_hsv_to_rgb(x: torch.Tensor) -> torch.Tensor:
    h, s, v = x.unbind(-3)
    i = torch.floor(h * 6.0)
    f = h * 6.0 - i
    i = i.to(torch.int64) % 6
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    sectors = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = torch.zeros_like(x)
    for k, channels in enumerate(sectors):
        out = torch.where((i == k).unsqueeze(-3), torch.stack(channels, dim=-3), out)
    return out


@pytest.mark.parametrize("kind", ["uniform", "8-bit", "gray", "black", "white"])
def test_hue_rotation_gives_the_textbook_formulas_bits(kind):
    g = torch.Generator().manual_seed(3)
    x = {
        "uniform": lambda: torch.rand(2, 3, 40, 40, generator=g),
        "8-bit": lambda: (
            torch.randint(0, 256, (2, 3, 40, 40), generator=g).float() / 255
        ),  # ties between channels
        "gray": lambda: torch.rand(2, 1, 40, 40, generator=g).expand(-1, 3, -1, -1),
        "black": lambda: torch.zeros(1, 3, 4, 4),
        "white": lambda: torch.ones(1, 3, 4, 4),
    }[kind]()
    hsv = _reference_rgb_to_hsv(x)
    assert torch.equal(rgb_to_hsv(x), hsv)
    assert torch.equal(hsv_to_rgb(hsv), _reference_hsv_to_rgb(hsv))
    for shift in (0.0, 0.05, -0.08, 1 / 6, 0.5):
        h, s, v = hsv.unbind(-3)
        want = _reference_hsv_to_rgb(torch.stack(((h + shift) % 1.0, s, v), dim=-3))
        assert torch.equal(adjust_hue(x, shift), want), shift
