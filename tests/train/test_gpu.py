"""GPU-only: captured graphs keep the step random and train; run on the device machine."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

from autotune.config import config_from_dict  # noqa: E402
from autotune.train.session import Session  # noqa: E402
from autotune.train.trial.record import Measurement  # noqa: E402


def _session(graphs: dict) -> Session:
    return Session(
        config_from_dict(
            {"preset": "tiny", "batch_size": 4, "graphs": graphs, "data": {"source": "synthetic"}}
        )
    )


@pytest.mark.parametrize(
    "graphs",
    [
        {"mode": "step", "warmup_steps": 2},
        {"mode": "regions", "regions": ["dit", "vision", "projectors"]},
    ],
)
def test_replays_stay_random_and_train(graphs):
    s = _session(graphs)
    batch = s.workload.synthetic_batch("tiny", 4, s.device, torch.Generator().manual_seed(0))
    losses = [s.step(batch)[0].item() for _ in range(8)]
    assert all(torch.isfinite(torch.tensor(losses)))
    # The same batch every step: only the noise, times and dropout change the loss.
    assert len({round(v, 6) for v in losses[-4:]}) == 4, losses


def test_step_graph_updates_weights():
    s = _session({"mode": "step", "warmup_steps": 2})
    batch = s.workload.synthetic_batch("tiny", 4, s.device, torch.Generator().manual_seed(0))
    for _ in range(3):
        s.step(batch)
    before = s.model.dit.proj_out_2.weight.detach().clone()
    s.step(batch)
    torch.cuda.synchronize()
    assert not torch.equal(before, s.model.dit.proj_out_2.weight)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_step_graph_with_the_all_reduce_inside_trains_as_the_one_without():
    """``ddp.graph_overlap``: NCCL all-reduces captured inside the backward's graph, on 2 GPUs."""
    from autotune.train.trial.launch import launch
    from autotune.train.window.verify import compare

    def run(overlap: bool) -> Measurement:
        cfg = config_from_dict(
            {
                "preset": "tiny",
                "batch_size": 4,
                "graphs": {"mode": "step", "warmup_steps": 2},
                "ddp": {"graph_overlap": overlap, "bucket_cap_mb": 1.0},
                "data": {"source": "synthetic"},
            }
        )
        result = launch(cfg, steps=6, warmup=3, nproc=2, timeout=300)
        assert result.ok, result
        return result.measurement

    plain, inside = run(False), run(True)
    assert compare(plain, inside, tolerance=0.01).passed, (plain.losses, inside.losses)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_two_gpu_step_graph_trains_as_eager_ddp():
    """The reducer's own path on NCCL (gradients copied into its buckets by the hooks, averaged by the
    collective, the all-reduce inside the graph) against DDP's eager step: the same training."""
    from autotune.train.trial.launch import launch
    from autotune.train.window.verify import compare

    def run(graphs: dict) -> Measurement:
        cfg = config_from_dict(
            {
                "preset": "tiny",
                "batch_size": 4,
                "graphs": graphs,
                "data": {"source": "synthetic"},
                "ddp": {"graph_overlap": graphs["mode"] == "step", "bucket_cap_mb": 1.0},
            }
        )
        result = launch(cfg, steps=8, warmup=4, nproc=2, timeout=300)
        assert result.ok, result
        return result.measurement

    eager, graph = run({"mode": "none"}), run({"mode": "step", "warmup_steps": 2})
    assert compare(eager, graph, tolerance=0.05).passed, (eager.losses, graph.losses)
    assert max(graph.grad_norms[-4:]) < 2 * max(eager.grad_norms[-4:])


def _eager_and_graph(**over) -> tuple[Measurement, Measurement]:
    """8 steps of tiny (4 samples) eager and in a captured whole step, each in a launched process."""
    from autotune.train.trial.launch import launch

    def run(mode: str) -> Measurement:
        cfg = config_from_dict(
            {
                "preset": "tiny",
                "batch_size": 4,
                "graphs": {"mode": mode},
                "data": {"source": "synthetic"},
                **over,
            }
        )
        result = launch(cfg, steps=8, warmup=4, nproc=1, timeout=300)
        assert result.ok, result
        return result.measurement

    return run("none"), run("step")


def test_a_one_gpu_step_graph_writes_its_gradients_afresh_each_replay():
    """One rank captures the backward with no gradients (no kept buffers to zero and add into): each
    replay must write them, not add to the last step's. Accumulating would grow the gradient norm
    step after step (clipping hides it from the weights, not from the norm)."""
    from autotune.train.window.verify import compare

    eager, graph = _eager_and_graph()
    assert compare(eager, graph, tolerance=0.05).passed, (eager.grad_norms, graph.grad_norms)
    assert max(graph.grad_norms[-4:]) < 2 * max(eager.grad_norms[-4:])


def test_a_one_gpu_step_graph_accumulates_its_micro_batches_and_writes_them_afresh_each_replay():
    """memory.accumulation_steps in a captured whole step (one rank): each replay runs both
    micro-batches, the first backward writing each gradient and the second adding to it. Trains as
    the eager accumulation does (parity), and the gradient norm does not grow as it would if a
    replay added to the last step's gradients."""
    from autotune.train.window.verify import compare

    eager, graph = _eager_and_graph(memory={"accumulation_steps": 2})
    assert compare(eager, graph, tolerance=0.05).passed, (eager.grad_norms, graph.grad_norms)
    assert max(graph.grad_norms[-4:]) < 2 * max(eager.grad_norms[-4:])
