"""Triton kernels of :class:`autotune.train.optim.master.MasterAdamW`: every tensor in one launch.

The tensors of one kind (bf16 gradient with an fp32 master and a bf16 weight, or fp32 gradient and
fp32 parameter) are described by tables on the device: per tensor, where each of its gradient,
value, moments and weight starts, as an element offset from a base tensor of the same column; per
block of ``BLOCK`` elements, its tensor and first element. One launch walks every block, so no
launch drains before the next starts (torch's multi-tensor kernels take at most 320 blocks a
launch) and small tensors cost a block, not a launch. The gradient norm walks the same tables, a few
blocks a program, each program writing its partial sum of squares.

Offsets from base pointers, both 16-byte aligned (checked on the host), let the compiler use wide
loads and stores (the update's: :data:`RUN`); so does the block's bound: a block that ends inside
its tensor runs unmasked, and only a tensor's last block is masked (a mask against a bound read from
memory is one the compiler cannot prove constant over 16 bytes, so every masked access is a scalar
one).

A block whose gradient is all zeros this step and whose moments are all zeros (an embodiment slot,
an embedding row no sample has used yet) takes the decay alone: AdamW's update of such an element is
``p * decay - step_size * 0 / (0 + eps)``, the decay to the bit, so the block reads and writes only
its value (and weight) instead of its gradient and both moments too. Its loads and stores of those
are masked off, the same instructions as the full update's, after every table lookup (a branch
around the loads and stores measured slower, with or without its lookups hoisted above it); only
the arithmetic between them, square root and divisions, sits in a branch an idle block skips
(BENCHMARKS.md, "The decay-only branch, measured" and the next). The norm pass, which reads
every gradient anyway, marks each block's gradient as zero or not; each table keeps which blocks'
moments are still all zeros (cleared as a block first has a gradient). With ``eps`` 0 no block is
skipped (its update is 0 / 0 there).

The first moment of the weights with masters may be stored in bf16 (``optimizer.exp_avg_dtype``):
loaded into fp32, updated there and rounded to nearest as it is stored.

Imported only where a CUDA device runs the optimizer: CPU builds of torch come without Triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024
"""Elements per program: 8 per thread of ``WARPS`` warps; the fastest of the block sizes and warp
counts measured on an H200 (BENCHMARKS.md, "the optimizer's pass"), with the update's loads then 16
bytes for every column."""
WARPS = 4

RUN = tl.constexpr(4)
"""Elements of a column the update loads or stores at once: 16 bytes of fp32, 8 of bf16. The same
for every column, so every tensor of the update has one layout (4 elements a thread at a time); with
a bf16 column's 8 elements (16 bytes) the compiler lays out the update by the bf16 gradient and
moves each fp32 tensor into another layout through shared memory to store it 16 bytes at once,
which takes registers (145 a thread against 72, Triton 3.6 for sm90) and shared memory."""

MAX_REGISTERS = {True: 72, False: 64}
"""Registers a thread of the update may use, by whether its table writes a bf16 weight: 7 and 8
programs of 4 warps an SM (the update only streams memory: the more programs, the more loads in
flight). The compiler fits the update under these without spilling (Triton 3.6 and 3.9 for sm90);
left to itself it may take more (80 with Triton 3.9: 6 programs)."""


@triton.jit
def _index(off_tab, t, offs, ALIGN: tl.constexpr, RUN: tl.constexpr):
    """Element indices of a block from its column's base: they start at a multiple of ``ALIGN``
    (16 bytes) and run on unbroken in pieces of ``RUN``, as the hints say; the compiler loads and
    stores a piece at once, at most 16 bytes."""
    start = tl.multiple_of(tl.load(off_tab + t), ALIGN)
    return tl.max_contiguous(tl.multiple_of(start + offs, ALIGN), RUN)


@triton.jit
def _adamw_block(
    g_ptr,
    p_ptr,
    m_ptr,
    v_ptr,
    w_ptr,
    mask,
    busy,
    idle,
    c,
    step_size,
    bc2_sqrt,
    decay,
    beta1,
    beta2,
    eps,
    HAS_W: tl.constexpr,
    MASKED: tl.constexpr,
):
    """``busy`` masks the gradient and moments: an idle block's loads of them read nothing (zeros
    stand in, which they are) and its moments are not written back; ``idle`` (the whole block's)
    skips the arithmetic, which would leave its value at the decay alone too."""
    if MASKED:
        mb = mask & busy
        g = tl.load(g_ptr, mask=mb, other=0.0).to(tl.float32)
        p = tl.load(p_ptr, mask=mask)
        m = tl.load(m_ptr, mask=mb, other=0.0).to(tl.float32)
        v = tl.load(v_ptr, mask=mb, other=0.0)
    else:
        g = tl.load(g_ptr, mask=busy, other=0.0).to(tl.float32)
        p = tl.load(p_ptr)
        m = tl.load(m_ptr, mask=busy, other=0.0).to(tl.float32)
        v = tl.load(v_ptr, mask=busy, other=0.0)
    p = p * decay
    # An idle block's value is its decay: the math below would give it to the bit, at the cost of
    # its square roots and divisions.
    if not idle:
        g = g * c
        m = m + (1.0 - beta1) * (g - m)
        v = v * beta2 + (1.0 - beta2) * (g * g)
        denom = tl.div_rn(tl.sqrt_rn(v), bc2_sqrt) + eps
        p = p - step_size * tl.div_rn(m, denom)
    if MASKED:
        tl.store(p_ptr, p, mask=mask)
        tl.store(m_ptr, m.to(m_ptr.dtype.element_ty), mask=mb)
        tl.store(v_ptr, v, mask=mb)
        if HAS_W:
            tl.store(w_ptr, p.to(tl.bfloat16), mask=mask)
    else:
        tl.store(p_ptr, p)
        tl.store(m_ptr, m.to(m_ptr.dtype.element_ty), mask=busy)
        tl.store(v_ptr, v, mask=busy)
        if HAS_W:
            tl.store(w_ptr, p.to(tl.bfloat16))


@triton.jit
def _adamw_kernel(
    blk_tensor,
    blk_start,
    g_base,
    p_base,
    m_base,
    v_base,
    w_base,
    g_off,
    p_off,
    m_off,
    v_off,
    w_off,
    numel_tab,
    index_tab,
    nonzero_tab,
    zero_state_tab,
    coefs,
    clip,
    n_all,
    beta1,
    beta2,
    eps,
    skip_idle,
    G_ALIGN: tl.constexpr,
    M_ALIGN: tl.constexpr,
    HAS_W: tl.constexpr,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    t = tl.load(blk_tensor + pid)
    start = tl.multiple_of(tl.load(blk_start + pid), BLOCK)
    n = tl.load(numel_tab + t)
    i = tl.load(index_tab + t)
    step_size = tl.load(coefs + i)
    bc2_sqrt = tl.load(coefs + n_all + i)
    decay = tl.load(coefs + 2 * n_all + i)
    c = tl.load(clip)
    offs = start + tl.arange(0, BLOCK)
    g_ptr = g_base + _index(g_off, t, offs, G_ALIGN, RUN)
    p_ptr = p_base + _index(p_off, t, offs, 4, RUN)
    m_ptr = m_base + _index(m_off, t, offs, M_ALIGN, RUN)
    v_ptr = v_base + _index(v_off, t, offs, 4, RUN)
    w_ptr = w_base + _index(w_off, t, offs, 8, RUN)
    has_grad = tl.load(nonzero_tab + pid) != 0
    idle = (tl.load(zero_state_tab + pid) != 0) & (has_grad == 0) & (skip_idle != 0)
    if has_grad:
        tl.store(zero_state_tab + pid, 0)
    busy = tl.zeros((BLOCK,), tl.int32) == idle.to(tl.int32)
    if start + BLOCK <= n:
        _adamw_block(g_ptr, p_ptr, m_ptr, v_ptr, w_ptr, None, busy, idle, c, step_size,
                     bc2_sqrt, decay, beta1, beta2, eps, HAS_W, False)  # fmt: skip
    else:
        _adamw_block(g_ptr, p_ptr, m_ptr, v_ptr, w_ptr, offs < n, busy, idle, c, step_size,
                     bc2_sqrt, decay, beta1, beta2, eps, HAS_W, True)  # fmt: skip


NORM_BLOCKS = 8
"""Blocks a program of the norm kernel sums (16 KB of a bf16 gradient): a block alone is 2 KB, too
little work for a program's table lookups to hide behind."""


@triton.jit
def _sumsq_kernel(
    blk_tensor,
    blk_start,
    g_base,
    g_off,
    numel_tab,
    out,
    nonzero_tab,
    n_blocks,
    G_ALIGN: tl.constexpr,
    BLOCK: tl.constexpr,
    NORM_BLOCKS: tl.constexpr,
):
    """``out[program]``: the sum of the squares (fp32) of the gradient elements of its blocks;
    ``nonzero_tab[block]``: 1 where the block's gradient has an element other than zero (NaN
    too)."""
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for j in range(NORM_BLOCKS):
        b = pid * NORM_BLOCKS + j
        if b < n_blocks:
            t = tl.load(blk_tensor + b)
            start = tl.multiple_of(tl.load(blk_start + b), BLOCK)
            n = tl.load(numel_tab + t)
            offs = start + tl.arange(0, BLOCK)
            # 16 bytes at once: the sum has no other layout to meet
            g_ptr = g_base + _index(g_off, t, offs, G_ALIGN, BLOCK)
            if start + BLOCK <= n:
                g = tl.load(g_ptr).to(tl.float32)
            else:
                g = tl.load(g_ptr, mask=offs < n, other=0.0).to(tl.float32)
            acc += g * g
            tl.store(nonzero_tab + b, tl.max((g != 0.0).to(tl.int8), axis=0))
    tl.store(out + pid, tl.sum(acc, axis=0))


def sumsq(table) -> torch.Tensor:
    """The sum of the squares of every gradient element of ``table``, in fp32 (a 0-d device
    tensor)."""
    programs = triton.cdiv(table.blocks, NORM_BLOCKS)
    out = torch.empty(programs, dtype=torch.float32, device=table.blk_tensor.device)
    _sumsq_kernel[(programs,)](
        table.blk_tensor,
        table.blk_start,
        table.base["g"],
        table.off["g"],
        table.numel,
        out,
        table.nonzero,
        table.blocks,
        G_ALIGN=_align(table.base["g"]),
        BLOCK=BLOCK,
        NORM_BLOCKS=NORM_BLOCKS,
        num_warps=WARPS,
    )
    return out.sum()


def update_options(has_weight: bool) -> dict[str, int]:
    """Triton's launch options of the update of a table with (or without) a bf16 weight."""
    return {"num_warps": WARPS, "maxnreg": MAX_REGISTERS[bool(has_weight)]}


def _align(t: torch.Tensor) -> int:
    """Elements in 16 bytes of ``t``'s dtype: every offset of that column is a multiple of it."""
    return 16 // t.element_size()


def adamw(
    table, coefs: torch.Tensor, clip: torch.Tensor, beta1: float, beta2: float, eps: float
) -> None:
    """The clipped AdamW update of every tensor of ``table``; ``coefs`` is [3, n]: step size, the
    square root of the second bias correction and the decay factor of each optimizer tensor. Blocks
    that :func:`sumsq` found without a gradient and whose moments are still zeros take the decay
    alone (the same numbers; see the module)."""
    b, o = table.base, table.off
    _adamw_kernel[(table.blocks,)](
        table.blk_tensor,
        table.blk_start,
        b["g"],
        b["p"],
        b["m"],
        b["v"],
        b["w"],
        o["g"],
        o["p"],
        o["m"],
        o["v"],
        o["w"],
        table.numel,
        table.index,
        table.nonzero,
        table.zero_state,
        coefs,
        clip,
        coefs.shape[1],
        beta1,
        beta2,
        eps,
        int(eps > 0),
        G_ALIGN=_align(b["g"]),
        M_ALIGN=_align(b["m"]),
        HAS_W=table.has_weight,
        BLOCK=BLOCK,
        **update_options(table.has_weight),
    )
