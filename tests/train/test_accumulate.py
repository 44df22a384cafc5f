"""Gradient accumulation (``memory.accumulation_steps``): k micro-batches make the update of one batch.

The GR00T loss draws its flow times and noise from the global generator inside the forward, so k
micro-batches draw them in another order than one batch does. The test records the draws of the
accumulating session and replays them, concatenated, to the one-batch session: both then compute
the same samples with the same noise, and only the accumulation differs. The loss is a masked mean:
each micro-batch's loss weighs by its share of the batch's mask (``accumulate.shares``), tested with
a full mask and with samples masked unevenly. The DiT's dropout masks are drawn per call as well and cannot be
replayed, so both sessions run their dropout layers as identities (``eval`` on those layers only).
"""

from __future__ import annotations

import pytest
import torch

from autotune.config import config_from_dict
from autotune.config.compat import Machine, check_compatible
from autotune.errors import ConfigError, IncompatibleConfigError
from autotune.export import trainer_arguments
from autotune.train.accumulate import micro_batches
from autotune.train.accumulate import shares as shares_of
from autotune.train.session import Session
from autotune.workloads.gr00t_common import head as gr00t_model

BATCH = 4


def tiny(steps: int, **extra):
    data = {
        "preset": "tiny",
        "batch_size": BATCH,
        "device": "cpu",
        "data": {"source": "synthetic"},
        "precision": {"default": "fp32", "frozen_dtype": "fp32"},
        "memory": {"accumulation_steps": steps},
        "optimizer": {"warmup_ratio": 0.0},
        **extra,
    }
    return config_from_dict(data)


class Draws:
    """Records the forward's random draws, or replays recorded ones concatenated into one call."""

    def __init__(self, monkeypatch):
        self.flow, self.noise, self.replay = [], [], False
        real_flow, real_noise = gr00t_model.sample_flow_times, torch.randn_like

        def flow(n, device):
            if self.replay:
                return torch.cat(self.flow)
            self.flow.append(real_flow(n, device))
            return self.flow[-1]

        def noise(like, **kw):
            if self.replay:
                return torch.cat(self.noise)
            self.noise.append(real_noise(like, **kw))
            return self.noise[-1]

        monkeypatch.setattr(gr00t_model, "sample_flow_times", flow)
        monkeypatch.setattr(torch, "randn_like", noise)


def batch_of(session, uneven: bool = False):
    gen = torch.Generator().manual_seed(3)
    batch = session.workload.synthetic_batch("tiny", BATCH, "cpu", gen)
    mask = torch.ones_like(batch["action_mask"])
    if uneven:  # sample 0 keeps one step of its horizon, sample 2 half of it
        horizon = mask.shape[1]
        mask[0, 1:] = 0
        mask[2, horizon // 2 :] = 0
    batch["action_mask"] = mask
    return batch


def without_dropout(session):
    for module in session.model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.eval()
    return session


def trained(session):
    return {n: p.detach().clone() for n, p in session.model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("steps,uneven", [(2, False), (4, False), (4, True)])
def test_k_micro_batches_make_the_update_of_one_batch(monkeypatch, steps, uneven):
    draws = Draws(monkeypatch)
    acc = without_dropout(Session(tiny(steps)))
    batch = batch_of(acc, uneven)
    before = trained(acc)
    loss_acc, norm_acc = acc.step(batch)
    assert len(draws.flow) == steps  # the forward ran once per micro-batch
    draws.replay = True
    one = without_dropout(Session(tiny(1)))
    assert all(torch.equal(before[n], p) for n, p in trained(one).items())  # same start
    loss_one, norm_one = one.step(batch)

    torch.testing.assert_close(loss_acc, loss_one, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(norm_acc, norm_one, rtol=1e-4, atol=1e-6)
    after_acc, after_one = trained(acc), trained(one)
    moved = max(float((after_one[n] - before[n]).abs().max()) for n in before)
    assert moved > 1e-5  # the update changed the weights: the comparison below means something
    for n in before:
        torch.testing.assert_close(after_acc[n], after_one[n], rtol=1e-4, atol=1e-6)
    # the schedule advanced once per update, not per micro-batch
    assert acc.schedule.last_epoch == one.schedule.last_epoch == 1


def test_micro_batches_weigh_by_their_share_of_the_mask():
    session = Session(tiny(4))
    parts = micro_batches(batch_of(session, uneven=True), 4)
    shares = [float(s) for s in shares_of(session.workload, parts)]
    horizon = parts[0]["action_mask"].shape[1]
    counts = [1, horizon, horizon - horizon // 2, horizon]
    assert shares == pytest.approx([c / sum(counts) for c in counts])


def test_micro_batches_are_the_batch_in_order():
    batch = {"x": torch.arange(8).reshape(8, 1), "y": torch.arange(8)}
    parts = micro_batches(batch, 4)
    assert [p["y"].tolist() for p in parts] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert micro_batches(batch, 1) == [batch]
    with pytest.raises(ConfigError, match="memory.accumulation_steps"):
        micro_batches(batch, 3)


def test_a_batch_the_steps_do_not_divide_is_refused_in_one_line():
    with pytest.raises(ConfigError) as err:
        tiny(3)
    assert str(err.value) == (
        "memory.accumulation_steps: 3 does not divide batch_size 4; "
        "allowed: a divisor of batch_size 4: [1, 2, 4]"
    )


def test_a_captured_whole_step_accumulates_on_one_rank_without_the_overlap_only():
    """One rank captures its micro-batches one after the other (GPU test:
    ``tests/train/test_gpu_knobs.py``); several ranks all-reduce from the backward's hooks and the
    overlap splits one forward, so with either accumulation is refused."""
    h100 = Machine(cuda=True, capability=(9, 0))
    check_compatible(tiny(2, graphs={"mode": "step"}, device="auto"), h100, ())
    two = Machine(cuda=True, capability=(9, 0), world_size=2)
    with pytest.raises(IncompatibleConfigError, match="memory.accumulation_steps: refused"):
        check_compatible(tiny(2, graphs={"mode": "step"}, device="auto"), two, ())
    overlap = tiny(
        2,
        graphs={"mode": "step"},
        device="auto",
        optimizer={"impl": "master", "overlap": True},
    )
    with pytest.raises(IncompatibleConfigError, match="memory.accumulation_steps: refused"):
        check_compatible(overlap, h100, ())


def test_trainer_args_carry_the_micro_batch_and_the_steps():
    args = trainer_arguments(tiny(4)).training_arguments
    assert args["per_device_train_batch_size"] == 1
    assert args["gradient_accumulation_steps"] == 4
    assert "gradient_accumulation_steps" not in trainer_arguments(tiny(1)).training_arguments


def test_accumulation_keeps_loss_parity_with_stock_at_the_same_batch():
    """Trial processes, as a study runs them: stock (one batch of 4) against 2 micro-batches of 2."""
    from autotune.train.window.verify import verify

    cfg = config_from_dict(
        {
            "preset": "tiny",
            "batch_size": BATCH,
            "device": "cpu",
            "data": {"source": "synthetic"},
            "memory": {"accumulation_steps": 2},
        }
    )
    result = verify(cfg, steps=6, timeout=240)
    assert result.passed, result
    assert result.steps >= 6
