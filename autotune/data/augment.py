"""Image augmentation of camera frames (GR00T's recipes), with torch ops only (no torchvision).

Per sample: resize the short edge to ``short_edge`` (N1.6) or the whole frame to ``image_shape``
(``short_edge`` None: N1.7) -> fractional random crop (0.95 of each side for N1.6, 230/256 for N1.7)
-> resize to ``image_shape`` (height, width) -> unless ``jitter`` is off (N1.7's default), colour
jitter (brightness 0.3, contrast 0.4, saturation 0.5, hue 0.08, in a random order as torchvision's
``ColorJitter``). Upstream replays one draw across the views of a sample, so every view gets the
same crop window and jitter. All randomness comes from the generator passed in, so a sample is the
same in any worker.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

_GRAY = (0.299, 0.587, 0.114)


@dataclass(frozen=True)
class AugmentSpec:
    image_shape: tuple[int, int]
    """(height, width) of the output."""
    short_edge: int | None = 256
    """The short edge the frame is first resized to; None: the whole frame to ``image_shape``."""
    crop_fraction: float = 0.95
    jitter: bool = True
    brightness: float = 0.3
    contrast: float = 0.4
    saturation: float = 0.5
    hue: float = 0.08


def short_edge_for(image_size: int) -> int:
    """Upstream's 256, except for toy image sizes (<= 128) that use 64 px videos."""
    return 256 if image_size > 128 else 64


def augment(frames: torch.Tensor, spec: AugmentSpec, generator: torch.Generator) -> torch.Tensor:
    """``frames``: uint8 [V, 3, H, W] (views of one sample) -> uint8 [V, 3, *spec.image_shape]."""
    x = frames.float().div_(255)
    if spec.short_edge is None:
        x = _resize(x, *spec.image_shape)
    else:
        x = _resize_short_edge(x, spec.short_edge)
    x = _random_crop(x, spec.crop_fraction, generator)
    x = _resize(x, *spec.image_shape)
    if spec.jitter:
        x = color_jitter(x, spec, generator)
    return x.mul_(255).round_().clamp_(0, 255).to(torch.uint8)


def _resize(x: torch.Tensor, h: int, w: int) -> torch.Tensor:
    if x.shape[-2:] == (h, w):
        return x
    return F.interpolate(
        x, size=(h, w), mode="bilinear", align_corners=False, antialias=True
    ).clamp_(0, 1)


def _resize_short_edge(x: torch.Tensor, short: int) -> torch.Tensor:
    h, w = x.shape[-2:]
    scale = short / min(h, w)
    return _resize(x, max(short, round(h * scale)), max(short, round(w * scale)))


def _random_crop(x: torch.Tensor, fraction: float, g: torch.Generator) -> torch.Tensor:
    h, w = x.shape[-2:]
    ch, cw = int(h * fraction), int(w * fraction)
    u = torch.rand(2, generator=g, dtype=torch.float64).tolist()
    top, left = int(u[0] * (h - ch + 1)), int(u[1] * (w - cw + 1))
    return x[..., top : top + ch, left : left + cw]


def color_jitter(x: torch.Tensor, spec: AugmentSpec, g: torch.Generator) -> torch.Tensor:
    """Float [V, 3, H, W] in [0, 1]; one factor per op for all views, ops in a random order."""
    u = torch.rand(4, generator=g, dtype=torch.float64).tolist()
    b = 1 + spec.brightness * (2 * u[0] - 1)
    c = 1 + spec.contrast * (2 * u[1] - 1)
    s = 1 + spec.saturation * (2 * u[2] - 1)
    h = spec.hue * (2 * u[3] - 1)
    for op in torch.randperm(4, generator=g).tolist():
        if op == 0:
            x = x.mul(b).clamp_(0, 1)
        elif op == 1:
            # float64 mean: a reduction's order depends on the thread count, and workers run one.
            mean = _gray(x).double().mean(dim=(-3, -2, -1), keepdim=True).float()
            x = _blend(x, mean, c)
        elif op == 2:
            x = _blend(x, _gray(x), s)
        else:
            x = adjust_hue(x, h)
    return x


def _gray(x: torch.Tensor) -> torch.Tensor:
    r, g, b = x.unbind(-3)
    return (_GRAY[0] * r + _GRAY[1] * g + _GRAY[2] * b).unsqueeze(-3)


def _blend(x: torch.Tensor, other: torch.Tensor, factor: float) -> torch.Tensor:
    return (factor * x + (1 - factor) * other).clamp_(0, 1)


def adjust_hue(x: torch.Tensor, shift: float) -> torch.Tensor:
    """Rotate the hue of RGB ``x`` (float in [0, 1]) by ``shift`` turns, through HSV."""
    h, s, v = _hsv(x)
    return _rgb(h.add_(shift).remainder_(1.0), s, v)


def rgb_to_hsv(x: torch.Tensor) -> torch.Tensor:
    """RGB [..., 3, H, W] in [0, 1] -> HSV, each in [0, 1] (hue in turns; 0 for grays)."""
    return torch.stack(_hsv(x), dim=-3)


def hsv_to_rgb(x: torch.Tensor) -> torch.Tensor:
    return _rgb(*x.unbind(-3))


# The loader's workers spend most of a sample's augmentation here, one thread each: the channels are
# kept apart (no stacking), maxima come from elementwise maximum (no reduction over a strided dim),
# temporaries are reused in place, and the sector's value is picked from the four distinct candidates.
# Every element goes through the same float operations in the same order as the textbook formulas,
# so the result is bit for bit the same (tests/data/test_transforms.py keeps those formulas).
def _hsv(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r, g, b = x.unbind(-3)
    maxc = torch.maximum(torch.maximum(r, g), b)
    delta = maxc - torch.minimum(torch.minimum(r, g), b)
    # In [0, 1] a black pixel has delta = +0, so delta / 1e-12 is the +0 the formula's "s = 0 where
    # max = 0" gives; and a gray one (delta = 0) has rc = gc = bc = 0 and max == r, so the hue below is
    # already the formula's 0 there: neither case needs its own pass.
    s = delta / maxc.clamp_min(1e-12)
    d = delta.clamp_min(1e-12)
    rc, gc, bc = (maxc - r).div_(d), (maxc - g).div_(d), (maxc - b).div_(d)
    # the three sectors' formulas ((2 + rc) - bc, as written left to right), chosen as max matches r, g, b
    h = torch.where(maxc == g, rc.add(2.0).sub_(bc), gc.add(4.0).sub_(rc))
    h = torch.where(maxc == r, bc.sub_(gc), h)
    return h.div_(6.0).remainder_(1.0), s, maxc


# sector (0..5) -> which of (v, q, p, t) each of r, g, b takes
_SECTOR_PICK = torch.tensor([[0, 1, 2, 2, 3, 0], [3, 0, 0, 1, 2, 2], [2, 2, 3, 0, 0, 1]])


def _rgb(h: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    h6 = h * 6.0
    i = torch.floor(h6)
    f = h6.sub_(i)
    sector = i.to(torch.int64).remainder_(6)
    p = v * (1 - s)
    q = v * s.mul(f).neg_().add_(1)  # 1 - s f: a - b is a + (-b) exactly in IEEE arithmetic
    t = v * s.mul(f.neg_().add_(1)).neg_().add_(1)
    picks = _SECTOR_PICK[:, sector]  # [3, *h.shape]
    rgb = torch.stack((v, q, p, t)).gather(0, picks)
    return rgb.movedim(0, -3).contiguous()
