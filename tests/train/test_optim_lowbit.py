"""Low-bit optimizer states (``optimizer.impl: adamw8bit`` / ``adamw4bit``, torchao) on the CPU:
they train, the 8-bit one stays within loss parity of fused AdamW, their state holds what
``state_bytes_per_param`` says, a checkpoint keeps the quantized codes and a resumed job continues
step for step; and the refusals of what cannot work, low-bit or offloaded, each one line.

The sessions freeze the tiny preset's projectors (1.46 M of its 1.72 M trainable parameters): on a
CPU the low-bit update runs eagerly (``autotune.train.optim.lowbit``), about a second per million
parameters here, and what is tested is the update, not the projectors. The offloaded state needs
CUDA: ``tests/train/test_gpu_lowbit.py``.
"""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("torchao.optim")

from autotune.cli import main  # noqa: E402
from autotune.config import OptimizerConfig, config_from_dict  # noqa: E402
from autotune.config.compat import Machine, check_machine  # noqa: E402
from autotune.errors import ConfigError, IncompatibleConfigError  # noqa: E402
from autotune.train.job import checkpoint  # noqa: E402
from autotune.train.optim import adamw as optim  # noqa: E402
from autotune.train.session import Session  # noqa: E402
from autotune.train.window.verify import compare, tolerance_for  # noqa: E402
from tests.train.test_train_cpu import tiny  # noqa: E402

FAST = {"model__freeze": ["projectors"], "optimizer__lr": 1e-3, "optimizer__total_steps": 20}
"""Projectors frozen (see the module docstring), a schedule short enough to train in a few steps."""
STATE_CLASS = {"adamw8bit": "OptimState8bit", "adamw4bit": "OptimState4bit"}


def _run(cfg, steps: int) -> tuple[Session, list[float], list[float]]:
    """``steps`` steps on two fixed batches in turn, the same random draws in each run."""
    s = Session(cfg)
    batches = [
        s.workload.synthetic_batch("tiny", 2, "cpu", torch.Generator().manual_seed(i))
        for i in range(2)
    ]
    losses, norms = [], []
    for i in range(steps):
        torch.manual_seed(100 + i % 2)  # each batch with the same draws each time it comes
        loss, norm = s.step(batches[i % 2])
        losses.append(float(loss))
        norms.append(float(norm))
    return s, losses, norms


@pytest.mark.parametrize("impl", ["adamw8bit", "adamw4bit"])
def test_a_low_bit_adamw_trains_tiny_and_holds_the_state_it_says(impl):
    s, losses, _ = _run(tiny(optimizer__impl=impl, **FAST), 4)
    assert type(s.optimizer).__name__ == {"adamw8bit": "AdamW8bit", "adamw4bit": "AdamW4bit"}[impl]
    # the same two batches (and draws) seen twice: each loss lower the second time
    assert all(b < a for a, b in zip(losses[:2], losses[2:])), losses
    quantized = [
        (p, st)
        for p, st in s.optimizer.state.items()
        if type(st["exp_avg"]).__name__ == STATE_CLASS[impl]
    ]
    assert quantized  # the large tensors' moments are quantized (torchao: 4096 values or more)
    for p, st in quantized:
        held = sum(
            t.numel() * t.element_size()
            for m in (st["exp_avg"], st["exp_avg_sq"])
            for t in (m.codes, m.scale)
        )
        assert held / p.numel() == pytest.approx(s.cfg.optimizer.state_bytes_per_param())


def test_8bit_states_keep_loss_parity_with_fused_adamw():
    """Not the same numbers (parity decides), and within the parity tolerance of a short run."""
    _, fused, fused_norms = _run(tiny(optimizer__impl="fused", **FAST), 6)
    cfg = tiny(optimizer__impl="adamw8bit", **FAST)
    _, low, low_norms = _run(cfg, 6)
    assert low[0] == fused[0] and low != fused  # the same first step, then its own updates
    ran = type("Run", (), {})
    a, b = ran(), ran()
    a.losses, a.grad_norms, b.losses, b.grad_norms = fused, fused_norms, low, low_norms
    result = compare(a, b, tolerance_for(cfg))
    assert result.passed, result


def test_state_bytes_per_param_of_every_impl():
    got = {
        impl: OptimizerConfig(impl=impl).state_bytes_per_param()
        for impl in ("foreach", "fused", "loop", "compiled", "master", "adamw8bit", "adamw4bit")
    }
    assert got == {
        "foreach": 8.0,
        "fused": 8.0,
        "loop": 8.0,
        "compiled": 8.0,
        "master": 12.0,
        "adamw8bit": 2 * (1 + 4 / 256),
        "adamw4bit": 2 * (0.5 + 4 / 128),
    }
    assert OptimizerConfig(impl="foreach").state_bytes_per_param(param_bytes=2) == 4.0
    assert OptimizerConfig(impl="fused", offload=True).state_bytes_per_param() == 0.0


@pytest.mark.slow
def test_a_low_bit_job_checkpoints_its_codes_and_resumes_step_for_step(tmp_path, capsys):
    cfg = tmp_path / "lowbit.yaml"
    cfg.write_text(
        "optimizer: {impl: adamw8bit, lr: 0.001, total_steps: 20}\nmodel: {freeze: [projectors]}\n"
    )
    args = ["--preset", "tiny", "--save-steps", "2", "--log-steps", "1", "--no-progress"]
    args += ["--json", "--config", str(cfg), "--max-steps", "3"]

    def train(out, *extra):
        code = main(["train", *args, "--output-dir", str(tmp_path / out), *extra])
        return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    code, whole = train("whole")
    assert code == 0 and len(whole["losses"]) == 3
    code, first = train("cut", "--stop-at", "2")
    assert code == 0 and first["losses"] == whole["losses"][:2]
    saved = checkpoint.latest(tmp_path / "cut", warn=pytest.fail).optimizer["state"]
    codes = [st["exp_avg"].codes for st in saved.values() if hasattr(st["exp_avg"], "codes")]
    assert codes and {c.dtype for c in codes} == {torch.uint8}  # as it was, not dequantized
    code, rest = train("cut")
    assert code == 0 and rest["start_step"] == 3 and rest["losses"] == whole["losses"][2:]


def test_a_users_adamw_is_made_again_with_low_bit_states():
    model = torch.nn.Linear(64, 128)
    own = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    opt = optim.rebuild_optimizer(own, "adamw8bit", capturable=False)
    assert type(opt).__name__ == "AdamW8bit" and opt.param_groups[0]["weight_decay"] == 0.1
    assert float(opt.param_groups[0]["lr"]) == pytest.approx(3e-4)
    with pytest.raises(ConfigError, match=r"optimizer.impl: 'adamw4bit' is refused: .* not a SGD"):
        optim.rebuild_optimizer(torch.optim.SGD(model.parameters()), "adamw4bit", capturable=False)


GPU = Machine(True, (9, 0), 1, 16)


@pytest.mark.parametrize(
    ("over", "machine", "message"),
    [
        (
            {"optimizer__impl": "fused", "optimizer__offload": True, "graphs__mode": "step"},
            GPU,
            r"optimizer.offload: refused: .* needs graphs.mode 'none' or 'regions'",
        ),
        (
            {"optimizer__impl": "fused", "optimizer__offload": True},
            Machine(False, None, 1, 2),
            r"optimizer.offload: refused: the optimizer state moves to host memory from a CUDA",
        ),
        (
            {"optimizer__impl": "fused", "optimizer__offload": True},
            Machine(True, (9, 0), 2, 16),
            r"optimizer.offload: refused: .* before DDP has all-reduced it",
        ),
    ],
)
def test_what_cannot_work_is_refused_in_one_line(over, machine, message):
    cfg = tiny(**over)
    cfg.device = "auto"
    with pytest.raises(IncompatibleConfigError, match=message) as info:
        check_machine(cfg, machine)
    assert "\n" not in str(info.value)


def test_bad_combinations_of_the_optimizer_section_name_the_key():
    with pytest.raises(
        ConfigError, match=r"optimizer.offload: True is not supported; allowed: false unless impl"
    ):
        config_from_dict({"optimizer": {"impl": "foreach", "offload": True}})
    with pytest.raises(ConfigError, match=r"optimizer.streams: 2 is not supported"):
        config_from_dict({"optimizer": {"impl": "adamw4bit", "streams": 2}})


def test_the_cli_refuses_offload_on_a_cpu_in_one_line(tmp_path, capsys):
    cfg = tmp_path / "offload.yaml"
    cfg.write_text("optimizer: {impl: fused, offload: true}\n")
    code = main(["train", "--config", str(cfg), "--preset", "tiny", "--steps", "1"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and err.count("\n") == 0 and "optimizer.offload: refused" in err, err


@pytest.mark.parametrize("impl", ["adamw8bit", "adamw4bit"])
def test_the_device_resident_update_makes_torchaos_state_and_trains_the_same(impl):
    """The update a GPU uses (rates and step counts as tensors beside the parameters, its state made
    before the first step) gives torchao's own state and weights, step for step."""
    from autotune.train.optim.lowbit import low_bit_adamw

    def run(capturable: bool):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.Linear(256, 8))
        opt = low_bit_adamw(
            [{"params": list(model.parameters()), "weight_decay": 0.01}],
            impl,
            lr=1e-3,
            betas=(0.9, 0.999),
            eps=1e-8,
            capturable=capturable,
        )
        gen = torch.Generator().manual_seed(1)
        with torch.compiler.set_stance("force_eager"):
            for _ in range(3):
                for p in model.parameters():
                    p.grad = torch.randn(p.shape, generator=gen)
                opt.step()
        return [p.detach().clone() for p in model.parameters()], opt

    (want, ao), (got, ours) = run(False), run(True)
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    for p_ao, p_ours in zip(ao.state, ours.state):
        a, b = ao.state[p_ao], ours.state[p_ours]
        assert {k: (type(v).__name__, v.dtype) for k, v in a.items()} == {
            k: (type(v).__name__, v.dtype) for k, v in b.items()
        }
        assert float(a["step"]) == float(b["step"]) == 3.0
