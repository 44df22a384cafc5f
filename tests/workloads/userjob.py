"""A small workload of the kind a user writes, for the contract and loader tests (no transformers)."""

from __future__ import annotations

import torch
from torch import nn

from autotune.workloads import Workload


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.blocks = nn.ModuleList([nn.Linear(16, 16) for _ in range(2)])
        self.out = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for b in self.blocks:
            h = h + torch.relu(b(h))
        return self.out(h)


class Rows(torch.utils.data.Dataset):
    def __init__(self, n: int = 24) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": torch.full((8,), float(i)), "y": torch.tensor(i % 4)}


class Stream(torch.utils.data.IterableDataset):
    """Iterable: shards itself by worker (each worker a disjoint stride of the rows)."""

    def __init__(self, n: int = 24) -> None:
        self.n = n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        start, step = (info.id, info.num_workers) if info else (0, 1)
        for i in range(start, self.n, step):
            yield {"x": torch.full((8,), float(i)), "y": torch.tensor(i % 4)}


class UserJob(Workload):
    name = "userjob"
    presets = ("one",)
    default_preset = "one"
    source = "rows"

    def build_model(self, preset, device="cpu"):
        with torch.device(device):
            return Net()

    def regions(self, model):
        return {"inp": [model.inp], "blocks": list(model.blocks), "out": [model.out]}

    def loss(self, model, batch):
        return nn.functional.cross_entropy(model(batch["x"]), batch["y"])

    def synthetic_batch(self, preset, batch_size, device, generator=None):
        return {
            "x": torch.randn(batch_size, 8, generator=generator).to(device),
            "y": torch.randint(0, 4, (batch_size,), generator=generator).to(device),
        }

    def dataset(self, preset, data, *, seed, rank=0, world_size=1):
        return Stream() if self.source == "stream" else Rows()

    def flops_per_sample(self, preset):
        return 6.0 * (8 * 16 + 2 * 16 * 16 + 16 * 4)
