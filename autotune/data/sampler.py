"""The order of samples: an endless, seeded, rank-sharded stream of ``(draw, index)`` keys.

Draw ``d`` of the global stream is position ``d % N`` of epoch ``d // N``'s permutation of the
``N`` frames; rank ``r`` of ``W`` takes the draws ``d % W == r``, so ranks never share a draw and
all of them can run for ever (DDP needs the same number of steps everywhere). The draw number also
seeds the sample's augmentation, so a frame seen twice is augmented differently each time, and a
sample is the same whichever worker (or the main process) loads it. ``start`` skips the draws
before it (a resumed job's data position: the draws its steps consumed), whatever the world size.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import Sampler

_ORDER, _AUGMENT = 1, 2  # seed streams


def mix_seed(*keys: int) -> int:
    """A 63-bit seed from a tuple of integers (distinct tuples give unrelated seeds)."""
    state = np.random.SeedSequence([k % 2**64 for k in keys]).generate_state(2, np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def sample_generator(seed: int, draw: int) -> torch.Generator:
    return torch.Generator().manual_seed(mix_seed(seed, _AUGMENT, draw))


class ShardedInfiniteSampler(Sampler[tuple[int, int]]):
    def __init__(
        self, num_samples: int, *, seed: int, rank: int = 0, world_size: int = 1, start: int = 0
    ) -> None:
        assert num_samples >= 1 and 0 <= rank < world_size and start >= 0, (
            num_samples,
            rank,
            world_size,
            start,
        )
        self.num_samples, self.seed, self.rank, self.world_size = (
            num_samples,
            seed,
            rank,
            world_size,
        )
        self.start = start
        """First draw of the global stream; read when iteration starts."""

    def epoch_order(self, epoch: int) -> list[int]:
        g = torch.Generator().manual_seed(mix_seed(self.seed, _ORDER, epoch))
        return torch.randperm(self.num_samples, generator=g).tolist()

    def __iter__(self) -> Iterator[tuple[int, int]]:
        draw, epoch, order = self.start + self.rank, -1, []
        while True:
            if draw // self.num_samples != epoch:
                epoch = draw // self.num_samples
                order = self.epoch_order(epoch)
            yield draw, order[draw % self.num_samples]
            draw += self.world_size
