"""The reducer's buckets follow the order gradients arrive in (as DDP's rebuilt buckets), on the
tiny GR00T replica and two gloo processes: in the declared layout the action and state encoders,
declared after the DiT but given their gradients after its whole backward, hold back every bucket
behind theirs; after the first step the buckets start as the backward goes."""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist

from autotune.config import DDPConfig, config_from_dict
from autotune.train import knobs
from autotune.train.distributed import FlatGradReducer
from autotune.workloads import get_workload
from tests.ports import free_port


def _worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    cfg = config_from_dict({"preset": "tiny", "batch_size": 2, "data": {"source": "synthetic"}})
    workload = get_workload(cfg.workload)
    torch.manual_seed(0)
    model = workload.build_model(cfg.preset, "cpu")
    knobs.apply_trainability(workload.regions(model), cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    torch.manual_seed(0)
    ref = workload.build_model(cfg.preset, "cpu")
    knobs.apply_trainability(workload.regions(ref), cfg)
    ref_params = [p for p in ref.parameters() if p.requires_grad]
    reducer = FlatGradReducer(params, DDPConfig(bucket_cap_mb=0.25), world, overlap=True)
    arrivals = [0]

    starts: list[list[int]] = []  # per step, the arrivals seen when each bucket started

    def count(_: torch.Tensor) -> None:  # registered after the reducer's hooks: runs after them
        arrivals[0] += 1
        starts[-1].extend([arrivals[0]] * (len(reducer._works) - len(starts[-1])))

    for p in params:
        p.register_post_accumulate_grad_hook(count)
    means = []
    for step in range(3):
        gen = torch.Generator().manual_seed(100 * step + rank)
        batch = workload.synthetic_batch(cfg.preset, 2, torch.device("cpu"), gen)
        reducer.begin()
        arrivals[0] = 0
        starts.append([])
        torch.manual_seed(step * 10 + rank)  # the loss's noise and times
        workload.loss(model, batch).backward()
        reducer()
        ref.zero_grad(set_to_none=True)
        torch.manual_seed(step * 10 + rank)
        workload.loss(ref, batch).backward()
        for q in ref_params:
            dist.all_reduce(q.grad)
        means.append(
            max(
                float((p.grad - q.grad / world).abs().max())
                for p, q in zip(params, ref_params, strict=True)
            )
        )
    with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
        json.dump({"starts": starts, "params": len(params), "max_abs_diff": max(means)}, fh)
    dist.barrier()
    dist.destroy_process_group()


def test_buckets_follow_the_backward_after_the_first_step(tmp_path):
    torch.multiprocessing.spawn(_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert got[0]["starts"] == got[1]["starts"]  # one layout on both ranks
    for g in got:
        assert g["max_abs_diff"] < 1e-6, g  # every step's gradients are the mean over the ranks
        first, *later = g["starts"]
        early = [sum(n < 0.6 * g["params"] for n in s) for s in g["starts"]]
        # declared layout: a bucket waits for the encoders (the ~70th gradient) and holds back those behind it
        assert max(first[len(first) // 4 : len(first) // 3]) >= 0.6 * g["params"], g
        # arrival order: more buckets under way early, on every step after the first
        assert all(e > early[0] for e in early[1:]), (early, g)
        assert later[0] == later[1], g
