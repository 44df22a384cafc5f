"""``optimizer.impl: master`` trains what torch's AdamW trains under bf16 autocast: the weights that
autocast only ever casts to bf16 are stored so, the forward and gradients are the same numbers, and
the update of their fp32 masters matches torch's to float rounding. (CPU: the torch path; the
Triton kernels are compared with it in ``tests/train/test_gpu_knobs.py``.)"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from autotune.config import OptimizerConfig, PrecisionConfig, config_from_dict
from autotune.config.compat import Machine, check_machine
from autotune.config.knob import numerics_of
from autotune.errors import ConfigError, IncompatibleConfigError
from autotune.train import precision
from autotune.train.job import state
from autotune.train.optim import adamw as optim
from autotune.train.optim.master import MasterAdamW, bf16_with_masters
from autotune.train.session import Session
from tests.train.test_train_cpu import tiny


class Net(nn.Module):
    """Linear layers (eligible), a LayerNorm (not: it computes with its fp32 weight) and an embedding
    whose weight is also a linear layer's (tied: not eligible either)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(16, 32)
        self.fc1, self.norm, self.fc2 = nn.Linear(32, 64), nn.LayerNorm(64), nn.Linear(64, 32)
        self.head = nn.Linear(32, 16, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(self.emb(ids)))))
            return self.head(h).float().square().mean()


def _train(
    impl: str, steps: int = 6, exp_avg: str = "fp32"
) -> tuple[list[float], list[float], dict[str, torch.Tensor], torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = Net()
    cfg = OptimizerConfig(impl=impl, lr=1e-2, total_steps=10, exp_avg_dtype=exp_avg)
    masters = {}
    if impl == "master":
        masters = bf16_with_masters(
            precision.autocast_only_params({"all": [model]}, PrecisionConfig())
        )
    groups = [
        {"params": [p for p in model.parameters() if p.ndim >= 2], "weight_decay": 0.1},
        {"params": [p for p in model.parameters() if p.ndim < 2], "weight_decay": 0.0},
    ]
    opt = optim.build_optimizer(groups, cfg, capturable=False, masters=masters)
    schedule = optim.build_schedule(opt, cfg)
    gen = torch.Generator().manual_seed(1)
    losses, norms = [], []
    for i in range(steps):
        loss = model(torch.randint(0, 16, (8, 12), generator=gen)) * (30.0 if i % 2 else 0.01)
        loss.backward()
        norms.append(float(optim.clip_and_step(opt, list(model.parameters()), 1.0)))
        losses.append(float(loss.detach()))
        opt.zero_grad(set_to_none=True)
        schedule.step()
    master = getattr(opt, "master", lambda p: None)
    weights = {
        n: (master(p) if master(p) is not None else p).detach().clone()
        for n, p in model.named_parameters()
    }
    return losses, norms, weights, opt


def test_only_linear_weights_that_autocast_casts_are_stored_in_bf16():
    model = Net()
    chosen = {id(p) for p in precision.autocast_only_params({"all": [model]}, PrecisionConfig())}
    names = {n for n, p in model.named_parameters() if id(p) in chosen}
    assert names == {
        "fc1.weight",
        "fc1.bias",
        "fc2.weight",
        "fc2.bias",
    }  # not the norm, not the tied embedding
    fp32 = precision.autocast_only_params({"all": [model]}, PrecisionConfig(default="fp32"))
    assert fp32 == []  # a region without autocast computes with the fp32 weights


def test_master_adamw_trains_the_same_weights_as_torch_adamw_under_autocast():
    want_losses, want_norms, want, _ = _train("foreach")
    losses, norms, got, opt = _train("master")
    assert isinstance(opt, MasterAdamW)
    assert losses[0] == want_losses[0] and norms[0] == pytest.approx(
        want_norms[0], rel=1e-6
    )  # the same first step
    assert max(norms) > 1.0 > min(norms)  # clipped on some steps, not on others
    assert losses == pytest.approx(want_losses, rel=1e-3) and norms == pytest.approx(
        want_norms, rel=1e-3
    )
    # The weights after two steps (one clipped) to float rounding; later, a bf16 weight one rounding
    # apart changes a gradient, and Adam's normalised step makes that difference grow.
    _, _, want, _ = _train("foreach", steps=2)
    _, _, got, _ = _train("master", steps=2)
    for name in want:
        assert got[name].dtype == torch.float32
        torch.testing.assert_close(
            got[name], want[name], rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}"
        )


def test_the_bf16_weight_is_its_master_rounded_after_every_step():
    _, _, _, opt = _train("master", steps=3)
    bf16 = [p for g in opt.param_groups for p in g["params"] if p.dtype == torch.bfloat16]
    assert len(bf16) == 4
    for p in bf16:
        assert torch.equal(p, opt.master(p).to(torch.bfloat16))


def test_the_state_dict_round_trips_in_fp32():
    _, _, _, opt = _train("master", steps=2)
    saved = {i: {k: v.clone() for k, v in s.items()} for i, s in opt.state_dict()["state"].items()}
    assert all(s["exp_avg"].dtype == torch.float32 and "master" not in s for s in saved.values())
    assert float(saved[0]["step"]) == 2.0
    _, _, _, fresh = _train("master", steps=1)
    fresh.load_state_dict({"state": saved, "param_groups": opt.state_dict()["param_groups"]})
    for i, s in fresh.state_dict()["state"].items():
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert s[key].dtype == torch.float32 and torch.equal(s[key], saved[i][key]), key
    assert isinstance(fresh.param_groups[0]["lr"], torch.Tensor)


def test_a_bf16_first_moment_is_the_fp32_one_rounded_and_kept_only_for_the_weights_with_masters():
    """``exp_avg_dtype: bf16``: the update runs in fp32 and stores the first moment rounded to
    nearest. Its first step is the fp32 moment's to the bit (the moment starts at zero and the
    update reads it before rounding); the losses then stay those of the fp32 moment to a rounding."""
    _, _, want, ref = _train("master", steps=1)
    _, _, got, opt = _train("master", steps=1, exp_avg="bf16")
    for name in want:
        assert torch.equal(got[name], want[name]), name
    params = [
        (p, q)
        for g, h in zip(opt.param_groups, ref.param_groups)
        for p, q in zip(g["params"], h["params"])
    ]
    for p, q in params:
        m, want_m = opt.state[p]["exp_avg"], ref.state[q]["exp_avg"]
        if opt.master(p) is not None:
            assert m.dtype == torch.bfloat16 and torch.equal(m, want_m.to(torch.bfloat16))
        else:  # the norm, the embedding: fp32 as before
            assert m.dtype == torch.float32 and torch.equal(m, want_m)
        assert opt.state[p]["exp_avg_sq"].dtype == torch.float32
    want_losses, _, _, _ = _train("master")
    losses, _, _, opt = _train("master", exp_avg="bf16")
    assert losses == pytest.approx(want_losses, rel=1e-2) and losses != want_losses
    saved = opt.state_dict()
    _, _, _, fresh = _train("master", steps=1, exp_avg="bf16")
    fresh.load_state_dict(saved)  # a resume keeps the bf16 moment as it was saved
    for i, s in fresh.state_dict()["state"].items():
        assert s["exp_avg"].dtype == saved["state"][i]["exp_avg"].dtype
        assert torch.equal(s["exp_avg"], saved["state"][i]["exp_avg"])


def test_a_bf16_first_moment_is_masters_and_changes_numerics():
    assert OptimizerConfig(impl="master", exp_avg_dtype="bf16").state_bytes_per_param() == 10.0
    assert OptimizerConfig(impl="master").state_bytes_per_param() == 12.0
    with pytest.raises(ConfigError, match="exp_avg_dtype"):
        OptimizerConfig(impl="fused", exp_avg_dtype="bf16")
    with pytest.raises(ConfigError, match="exp_avg_dtype"):
        OptimizerConfig(impl="master", exp_avg_dtype="fp16")
    cfg = config_from_dict({"optimizer": {"impl": "master", "exp_avg_dtype": "bf16"}})
    assert numerics_of(type(cfg), cfg) == {"optimizer.exp_avg_dtype": "bf16"}


def test_a_session_trains_the_replica_as_the_foreach_optimizer_does():
    """tiny, bf16: the DiT's and the trained LLM layers' linear weights in bf16, everything else as before."""
    ref, s = Session(tiny()), Session(tiny(optimizer__impl="master"))
    dtypes = {n: p.dtype for n, p in s.model.named_parameters() if p.requires_grad}
    assert dtypes["dit.blocks.0.ff_in.weight"] == torch.bfloat16
    assert dtypes["llm_trainable.blocks.0.self_attn.q_proj.weight"] == torch.bfloat16
    assert dtypes["llm_trainable.blocks.0.input_layernorm.weight"] == torch.float32
    assert (
        dtypes["projectors.state_encoder.layer1.W"] == torch.float32
    )  # gathered per sample: summed in fp32
    assert dtypes["position_embedding.weight"] == torch.float32
    assert {p.dtype for p in s.model.vision.parameters()} == {torch.bfloat16}  # frozen, as before
    batches = [
        ref.workload.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(i))
        for i in range(4)
    ]
    got, want = [], []
    for b in batches:
        torch.manual_seed(7)
        want += [float(x) for x in ref.step(b)]
        torch.manual_seed(7)
        got += [float(x) for x in s.step(b)]
    assert got[:2] == pytest.approx(want[:2], rel=1e-6)  # the first loss and gradient norm
    assert got == pytest.approx(want, rel=1e-3)
    weights, ref_weights = state.trainable(s), state.trainable(ref)
    assert {t.dtype for t in weights.values()} == {
        torch.float32
    }  # the checkpoint sees the fp32 masters
    for name, t in ref_weights.items():
        torch.testing.assert_close(
            weights[name], t, rtol=1e-3, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}"
        )


def test_a_checkpoint_s_weights_set_both_the_weight_and_its_master():
    s = Session(tiny(optimizer__impl="master"))
    name = "dit.blocks.0.ff_in.weight"
    new = {n: torch.randn_like(t) for n, t in state.trainable(s).items()}
    state.load_weights(s, new, "test")
    param = dict(s.model.named_parameters())[name]
    assert torch.equal(state.trainable(s)[name], new[name])
    assert torch.equal(param, new[name].to(torch.bfloat16))


def test_master_is_refused_where_it_cannot_be_exact():
    with pytest.raises(
        ConfigError, match=r"optimizer.streams: 2 is not supported; allowed: 1 with impl 'master'"
    ):
        config_from_dict({"optimizer": {"impl": "master", "streams": 2}})
    cfg = tiny(optimizer__impl="master")
    with pytest.raises(
        IncompatibleConfigError, match=r"optimizer.impl: refused: 'master' trains on one process"
    ):
        check_machine(cfg, Machine(False, None, 2, 2))
    with pytest.raises(IncompatibleConfigError, match=r"precision.trainable_dtype 'fp32'"):
        check_machine(
            tiny(optimizer__impl="master", precision__trainable_dtype="bf16"),
            Machine(False, None, 1, 2),
        )


def test_overlap_is_refused_where_the_update_could_not_run_beside_the_prefix():
    with pytest.raises(
        ConfigError,
        match=r"optimizer.overlap: True is not supported; allowed: false unless impl is 'master'",
    ):
        config_from_dict({"optimizer": {"impl": "fused", "overlap": True}})
    gpu = Machine(True, (9, 0), 1, 16)
    with pytest.raises(
        IncompatibleConfigError, match=r"optimizer.overlap: refused: .* needs graphs.mode 'step'"
    ):
        check_machine(tiny(device="auto", optimizer__impl="master", optimizer__overlap=True), gpu)
    with pytest.raises(
        IncompatibleConfigError, match=r"optimizer.impl: refused: 'master' trains on one process"
    ):
        check_machine(
            tiny(
                device="auto",
                optimizer__impl="master",
                optimizer__overlap=True,
                graphs__mode="step",
            ),
            Machine(True, (9, 0), 2, 16),
        )


def test_the_split_loss_is_the_loss_and_its_prefix_must_be_frozen():
    s = Session(tiny())
    split = s._loss_split()
    assert split.regions == ("vision", "connector", "llm_frozen")
    batch = s.workload.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(3))
    torch.manual_seed(1)
    want = s.model(batch)
    torch.manual_seed(1)
    with torch.no_grad():
        carry = split.prefix(batch)
    assert torch.equal(split.rest(carry, batch), want)
    with pytest.raises(IncompatibleConfigError, match=r"the prefix's regions \['vision'\] train"):
        Session(tiny(model__unfreeze=["vision"]))._loss_split()


def test_a_tensor_without_a_gradient_is_left_alone_and_its_step_not_counted():
    torch.manual_seed(0)
    a, b = torch.nn.Parameter(torch.randn(8)), torch.nn.Parameter(torch.randn(8))
    opt = MasterAdamW(
        [{"params": [a, b], "weight_decay": 0.1}], lr=1e-2, betas=(0.9, 0.999), eps=1e-8, masters={}
    )
    ref = torch.optim.AdamW([a.detach().clone().requires_grad_()], lr=1e-2, weight_decay=0.1)
    before = b.detach().clone()
    for _ in range(2):
        a.grad = torch.ones(8)
        ref.param_groups[0]["params"][0].grad = torch.ones(8)
        opt.step()
        ref.step()
    assert (
        torch.equal(b, before)
        and float(opt.state[b]["step"]) == 0.0
        and float(opt.state[a]["step"]) == 2.0
    )
    torch.testing.assert_close(
        a.detach(), ref.param_groups[0]["params"][0].detach(), rtol=1e-6, atol=1e-7
    )


def test_a_users_adamw_is_made_again_as_master_and_another_optimizer_is_refused():
    model = Net()
    own = torch.optim.AdamW(
        [
            {"params": [model.fc1.weight], "weight_decay": 0.2},
            {"params": [model.fc2.weight], "lr": 3e-4},
        ],
        lr=1e-3,
        betas=(0.8, 0.99),
        eps=1e-6,
    )
    opt = optim.rebuild_optimizer(own, "master", capturable=False, masters={})
    assert isinstance(opt, MasterAdamW)
    assert [float(g["lr"]) for g in opt.param_groups] == pytest.approx([1e-3, 3e-4])
    assert [g["weight_decay"] for g in opt.param_groups] == [0.2, 0.01] and opt.param_groups[0][
        "betas"
    ] == (0.8, 0.99)
    with pytest.raises(
        ConfigError, match=r"'master' is refused: it replaces torch's AdamW, not a SGD"
    ):
        optim.rebuild_optimizer(
            torch.optim.SGD(model.parameters(), lr=0.1), "master", capturable=False
        )


def test_trainer_args_say_that_master_and_overlap_do_not_carry_over():
    from autotune.export import trainer_arguments

    cfg = config_from_dict(
        {"optimizer": {"impl": "master", "overlap": True}, "graphs": {"mode": "step"}}
    )
    export = trainer_arguments(cfg)
    assert export.training_arguments["optim"] == "adamw_torch"
    assert (
        "fp32 masters" in export.not_carried["optimizer.impl"]
        and "optimizer.overlap" in export.not_carried
    )
