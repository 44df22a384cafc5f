"""The master kernels' idle blocks: a block with no gradient this step and no moments yet (an
embodiment slot no sample used) takes the decay alone, and the update is the same to the bit as the
full one's. The kernels run in Triton's interpreter on the CPU (skipped where Triton is not
installed, as on a CPU build of torch); ``tests/train/test_gpu_knobs.py`` runs them on a GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from unittest import mock

import pytest
import torch

from autotune.train.optim import master as M
from autotune.train.optim.master import MasterAdamW, bf16_with_masters

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
"""Triton reads it as it is imported (its own library's kernels are decorated then): this file's
tests run in a process started with it, which the test below starts."""
interpreted = pytest.mark.skipif(not INTERPRETED, reason="runs in Triton's interpreter's process")


def test_the_kernels_in_tritons_interpreter():
    if INTERPRETED:
        pytest.skip("this is the interpreter's process")
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", __file__],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "7 passed" in run.stdout.splitlines()[-1], run.stdout[-2000:]


def _grads(steps: int, gen: torch.Generator) -> list[list[torch.Tensor]]:
    """Per step: a slot weight [8, 40, 48] whose slot 3 alone has gradients (slot 5 one element at
    step 2), a bf16 weight whose first two blocks have none at step 0, a tensor that never has any."""
    out = []
    for i in range(steps):
        slots = torch.zeros(8, 40, 48)
        slots[3] = torch.randn(40, 48, generator=gen) * (50 if i % 2 else 0.01)
        if i == 2:
            slots[5, 0, 0] = 1.0
        lin = torch.randn(3000, generator=gen).to(torch.bfloat16)
        if i == 0:
            lin[:2048] = 0
        out.append([slots, lin, torch.zeros(1029)])
    return out


def _optimizer(
    eps: float = 1e-8, exp_avg: str = "fp32"
) -> tuple[MasterAdamW, list[torch.nn.Parameter]]:
    gen = torch.Generator().manual_seed(0)
    params = [
        torch.nn.Parameter(torch.randn(8, 40, 48, generator=gen)),
        torch.nn.Parameter(torch.randn(3000, generator=gen)),
        torch.nn.Parameter(torch.randn(1029, generator=gen)),
    ]
    masters = bf16_with_masters(params[1:2])
    opt = MasterAdamW(
        [{"params": params, "weight_decay": 0.1}],
        lr=1e-2,
        betas=(0.9, 0.999),
        eps=eps,
        masters=masters,
        exp_avg_dtype=exp_avg,
    )
    opt.use_kernels = True
    return opt, params


def _train(opt, params, grads) -> None:
    for step in grads:
        for p, g in zip(params, step):
            p.grad = g
        opt.step(max_norm=1.0)


def _state(opt, params) -> list[torch.Tensor]:
    out = [p.detach().clone() for p in params]
    for p in params:
        master = opt.master(p)
        out += [t.clone() for t in (master if master is not None else p, *_moments(opt, p))]
    return out


def _moments(opt, p) -> tuple[torch.Tensor, torch.Tensor]:
    return opt.state[p]["exp_avg"], opt.state[p]["exp_avg_sq"]


def _none_idle(m, v, block):
    """No block known to have zero moments: every block takes the full update."""
    return torch.zeros(sum(-(-t.numel() // block) for t in m), dtype=torch.int8)


@interpreted
@pytest.mark.parametrize("exp_avg", ["fp32", "bf16"])
def test_idle_blocks_update_to_the_bit_as_the_full_update(exp_avg):
    opt, params = _optimizer(exp_avg=exp_avg)
    _train(opt, params, _grads(4, torch.Generator().manual_seed(1)))
    got = _state(opt, params)
    flags = [t.zero_state.tolist() for t in opt._tables]
    with mock.patch.object(M, "_zero_blocks", _none_idle):
        opt, params = _optimizer(exp_avg=exp_avg)
        _train(opt, params, _grads(4, torch.Generator().manual_seed(1)))
    want = _state(opt, params)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    # the fp32 table: the slot weight's 15 blocks (slot 3 spans blocks 5-7, slot 5's element is in
    # block 9), then the 2 blocks that never had a gradient; the bf16 weight's blocks all had one
    by_kind = {t.has_weight: f for t, f in zip(opt._tables, flags)}
    assert by_kind[False] == [1, 1, 1, 1, 1, 0, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1]
    assert by_kind[True] == [0, 0, 0]


@interpreted
def test_an_idle_block_reads_neither_its_gradient_nor_its_moments():
    """Marked idle, a block's value takes the decay whatever its moments hold: the kernel took the
    short path (the full one would move the value by the planted moments)."""
    opt, params = _optimizer()
    slots = params[0]
    _train(opt, params, _grads(1, torch.Generator().manual_seed(1)))
    before = slots.detach().clone()
    m, v = _moments(opt, slots)
    m[0].fill_(1.0)  # slot 0: moments planted behind a flag that still says zeros
    v[0].fill_(1.0)
    for p, g in zip(params, _grads(1, torch.Generator().manual_seed(2))[0]):
        p.grad.copy_(g)  # in place: the tables (and their flags) stay those of these gradients
    opt.step(max_norm=1.0)
    decay = 1 - 1e-2 * 0.1
    torch.testing.assert_close(slots.detach()[0], before[0] * decay, rtol=0, atol=0)
    assert torch.equal(m[0], torch.ones_like(m[0]))


def _bf16_moment_run(grads, kernels: bool) -> tuple[list[torch.Tensor], MasterAdamW, list]:
    opt, params = _optimizer(exp_avg="bf16")
    opt.use_kernels = kernels
    _train(opt, params, grads)
    return _state(opt, params), opt, params


@interpreted
def test_a_bf16_first_moment_updates_as_the_torch_path():
    """``exp_avg_dtype: bf16``: the kernels load the bf16 moment into fp32, update there and store it
    rounded, as the torch path does. After one step the bf16 tensors are within one bf16 step of
    the torch path's (Triton's interpreter truncates where a GPU rounds to nearest: the GPU test
    holds them to the bit, and over several steps)."""
    grads = _grads(1, torch.Generator().manual_seed(1))
    got, opt, params = _bf16_moment_run(grads, kernels=True)
    assert opt.state[params[1]]["exp_avg"].dtype == torch.bfloat16  # the weight with a master
    assert opt.state[params[0]]["exp_avg"].dtype == torch.float32
    want, _, _ = _bf16_moment_run(grads, kernels=False)
    for a, b in zip(got, want):
        rtol = 1e-5 if a.dtype == torch.float32 else 2**-7  # a bf16 step
        torch.testing.assert_close(a.float(), b.float(), rtol=rtol, atol=0)


@interpreted
def test_with_eps_zero_no_block_is_idle():
    """With eps 0 AdamW's update of an element without gradient or moments is 0 / 0: the full update
    runs everywhere, as torch's would."""
    opt, params = _optimizer(eps=0.0)
    _train(opt, params, _grads(2, torch.Generator().manual_seed(1)))
    assert torch.isnan(params[0].detach()[0]).all()


@interpreted
@pytest.mark.parametrize("built", [False, True], ids=["fresh", "tables-built"])
def test_loaded_moments_clear_the_idle_flags(built):
    """A resumed optimizer updates as the one that went on: moments loaded into an optimizer (whose
    tables may exist already, read by a captured update) are no longer taken for zeros."""
    grads = _grads(4, torch.Generator().manual_seed(1))
    opt, params = _optimizer()
    _train(opt, params, grads)
    want = _state(opt, params)

    opt, params = _optimizer()
    _train(opt, params, grads[:2])
    saved = opt.state_dict()
    values = [(opt.master(p) if opt.master(p) is not None else p).detach().clone() for p in params]
    resumed, params2 = _optimizer()
    if built:
        _train(resumed, params2, [[torch.zeros_like(g) for g in grads[0]]])
    with torch.no_grad():
        for p, value in zip(params2, values):
            target = resumed.master(p)
            (target if target is not None else p).copy_(value)
            p.copy_(value.to(p.dtype))
    resumed.load_state_dict(saved)
    _train(resumed, params2, grads[2:])
    for a, b in zip(_state(resumed, params2), want):
        assert torch.equal(a, b)


def _sm90_resources(has_weight: bool, exp_avg: str = "fp32") -> dict[str, int]:
    """The update compiled for an H100/H200 (sm90) as ``adamw`` launches it, on this CPU: the
    registers and stack a thread takes, as the cubin says."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from autotune.train.optim import master_kernels as K

    ptr = {"g_base": "*bf16" if has_weight else "*fp32", "p_base": "*fp32", "m_base": "*" + exp_avg,
           "v_base": "*fp32", "w_base": "*bf16", "nonzero_tab": "*i8", "zero_state_tab": "*i8",
           "blk_tensor": "*i32", "coefs": "*fp32", "clip": "*fp32"}  # fmt: skip
    scalars = {"n_all": "i32", "beta1": "fp32", "beta2": "fp32", "eps": "fp32", "skip_idle": "i32"}
    consts = {"G_ALIGN": 8 if has_weight else 4, "M_ALIGN": 8 if exp_avg == "bf16" else 4,
              "HAS_W": has_weight, "BLOCK": K.BLOCK}  # fmt: skip
    names = list(K._adamw_kernel.arg_names)
    sig = {n: ptr.get(n, scalars.get(n, "constexpr" if n in consts else "*i64")) for n in names}
    aligned = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if sig[n][0] == "*"}
    src = ASTSource(fn=K._adamw_kernel, signature=sig, constexprs=consts, attrs=aligned)
    kernel = triton.compile(
        src, target=GPUTarget("cuda", 90, 32), options=K.update_options(has_weight)
    )
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with open(
        os.path.join(os.environ.get("TMPDIR", "/tmp"), f"adamw-{os.getpid()}.cubin"), "wb"
    ) as f:
        f.write(kernel.asm["cubin"])
    try:
        out = subprocess.run(
            [tool, "--dump-resource-usage", f.name], capture_output=True, text=True
        )
    finally:
        os.unlink(f.name)
    return {k: int(v) for k, v in re.findall(r"\b(REG|STACK|SHARED):(\d+)", out.stdout)}


@pytest.mark.parametrize(
    "has_weight, exp_avg",
    [(True, "fp32"), (True, "bf16"), (False, "fp32")],
    ids=["bf16-table", "bf16-table-bf16-moment", "fp32-table"],
)
def test_the_update_fits_seven_programs_an_sm_without_spilling(has_weight, exp_avg):
    """Seven programs of the bf16 table's update fit an SM (72 registers a thread), eight of the fp32
    table's (64); nothing spills to the stack under those caps, and no tensor moves between layouts
    through shared memory (every column loaded and stored in pieces of one size)."""
    if INTERPRETED:
        pytest.skip("compiles for a GPU: the outer process's test")
    used = _sm90_resources(has_weight, exp_avg)
    assert used["STACK"] == 0, used
    assert used["REG"] <= (72 if has_weight else 64), used
    assert used["SHARED"] == 0, used
