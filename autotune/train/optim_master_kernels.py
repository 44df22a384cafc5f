"""Triton kernels of :class:`autotune.train.optim_master.MasterAdamW`: every tensor in one launch.

The tensors of one kind (bf16 gradient with an fp32 master and a bf16 weight, or fp32 gradient and
fp32 parameter) are described by tables on the device: a row of addresses per tensor, and a row
per block of ``BLOCK`` elements naming its tensor and first element. One launch walks every block,
so no launch drains before the next starts (torch's multi-tensor kernels take at most 320 blocks a
launch) and small tensors cost a block, not a launch.

Imported only where a CUDA device runs the optimizer: CPU builds of torch come without Triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 4096
"""Elements per program: 16 per thread of 8 warps, enough bytes in flight per SM to stream memory."""


@triton.jit
def _pointer(table, t, DTYPE: tl.constexpr):
    # The allocator aligns every tensor it hands out to 512 bytes, and the tables are built only from
    # tensors that start at their storage (checked on the host): 16-byte vector loads are safe.
    return tl.multiple_of(tl.load(table + t).to(tl.pointer_type(DTYPE)), 16)


@triton.jit
def _sumsq_kernel(blk_tensor, blk_start, g_tab, numel_tab, out, G_DTYPE: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    t = tl.load(blk_tensor + pid)
    start = tl.multiple_of(tl.load(blk_start + pid), BLOCK)
    offs = start + tl.arange(0, BLOCK)
    mask = offs < tl.load(numel_tab + t)
    g = tl.load(_pointer(g_tab, t, G_DTYPE) + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out + pid, tl.sum(g * g, axis=0))


@triton.jit
def _adamw_kernel(blk_tensor, blk_start, g_tab, p_tab, m_tab, v_tab, w_tab, numel_tab, index_tab,
                  coefs, clip, n_all, beta1, beta2, eps,
                  G_DTYPE: tl.constexpr, HAS_W: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    t = tl.load(blk_tensor + pid)
    start = tl.multiple_of(tl.load(blk_start + pid), BLOCK)
    offs = start + tl.arange(0, BLOCK)
    mask = offs < tl.load(numel_tab + t)
    i = tl.load(index_tab + t)
    step_size = tl.load(coefs + i)
    bc2_sqrt = tl.load(coefs + n_all + i)
    decay = tl.load(coefs + 2 * n_all + i)

    g = tl.load(_pointer(g_tab, t, G_DTYPE) + offs, mask=mask, other=0.0).to(tl.float32) * tl.load(clip)
    p_ptr = _pointer(p_tab, t, tl.float32) + offs
    m_ptr = _pointer(m_tab, t, tl.float32) + offs
    v_ptr = _pointer(v_tab, t, tl.float32) + offs
    p = tl.load(p_ptr, mask=mask) * decay
    m = tl.load(m_ptr, mask=mask)
    m = m + (1.0 - beta1) * (g - m)
    v = tl.load(v_ptr, mask=mask) * beta2 + (1.0 - beta2) * (g * g)
    denom = tl.div_rn(tl.sqrt_rn(v), bc2_sqrt) + eps
    p = p - step_size * tl.div_rn(m, denom)
    tl.store(p_ptr, p, mask=mask)
    tl.store(m_ptr, m, mask=mask)
    tl.store(v_ptr, v, mask=mask)
    if HAS_W:
        tl.store(_pointer(w_tab, t, tl.bfloat16) + offs, p.to(tl.bfloat16), mask=mask)


_TL = {torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}


def sumsq(table, out: torch.Tensor) -> None:
    """Each block's sum of squared gradients into ``out`` (one float per block of ``table``)."""
    _sumsq_kernel[(table.blocks,)](table.blk_tensor, table.blk_start, table.g, table.numel, out,
                                   G_DTYPE=_TL[table.grad_dtype], BLOCK=BLOCK, num_warps=8)


def adamw(table, coefs: torch.Tensor, clip: torch.Tensor, beta1: float, beta2: float, eps: float) -> None:
    """The clipped AdamW update of every tensor of ``table``; ``coefs`` is [3, n]: step size, the
    square root of the second bias correction and the decay factor of each optimizer tensor."""
    _adamw_kernel[(table.blocks,)](table.blk_tensor, table.blk_start, table.g, table.p, table.m, table.v, table.w,
                                   table.numel, table.index, coefs, clip, coefs.shape[1], beta1, beta2, eps,
                                   G_DTYPE=_TL[table.grad_dtype], HAS_W=table.has_weight, BLOCK=BLOCK, num_warps=8)
