"""What each device event of a step does, by name: one ordered table, the first match wins.

The kinds are what a step's kernel time is spent on and what a change to the step moves:
matrix multiplies, attention, the optimizer's update, reductions, pointwise kernels, memsets,
copies, communication, and the rest. Order matters where names share words: Inductor's
kernels name every operator they fuse (``triton_poi_fused__scaled_dot_product_cudnn_attention_...``
is a pointwise kernel around attention, not attention), so their prefix decides first;
attention's own kernels name CUTLASS types, so attention is matched before GEMMs; cuBLASLt's
split-K ``splitKreduce_kernel`` is part of a GEMM, so GEMMs are matched before reductions.
"""

from __future__ import annotations

from enum import IntEnum

from autotune.profiling.kinds import Pattern, first_match, pattern


class KernelKind(IntEnum):
    """Kinds in the order the table lists them."""

    GEMM = 0
    ATTENTION = 1
    UPDATE = 2
    REDUCTION = 3
    POINTWISE = 4
    MEMSET = 5
    MEMCPY = 6
    COMM = 7
    OTHER = 8


LABELS: dict[KernelKind, str] = {
    KernelKind.GEMM: "GEMM",
    KernelKind.ATTENTION: "attention",
    KernelKind.UPDATE: "optimizer update",
    KernelKind.REDUCTION: "reductions",
    KernelKind.POINTWISE: "pointwise",
    KernelKind.MEMSET: "memset",
    KernelKind.MEMCPY: "memcpy",
    KernelKind.COMM: "communication",
    KernelKind.OTHER: "other",
}


KERNEL_TABLE: tuple[Pattern, ...] = (
    pattern("nccl", r"^nccl|ncclKernel|ncclDevKernel|^rccl", KernelKind.COMM),
    # Kineto's names of copies and sets; a graph's copy and set nodes run as driver kernels.
    pattern("copy", r"^(hip)?Memcpy|^memcpy\d*_", KernelKind.MEMCPY),
    pattern("set", r"^(hip)?Memset|^memset\d*_", KernelKind.MEMSET),
    # The update of autotune.train.optim.master_kernels (and its gradient norm), torch's fused
    # and foreach optimizers, and Inductor's foreach kernels of a compiled optimizer.
    pattern(
        "optimizer",
        r"^_adamw_kernel$|^_sumsq_kernel$|multi_tensor_apply|(?i:adam)|_foreach_|^triton_for_",
        KernelKind.UPDATE,
    ),
    pattern("inductor attention template", r"^triton_tem_.*(flex|attention)", KernelKind.ATTENTION),
    pattern("inductor matmul template", r"^triton_tem_.*(mm|conv)", KernelKind.GEMM),
    pattern("inductor reduction", r"^triton_(red|per)_", KernelKind.REDUCTION),
    pattern("inductor pointwise", r"^triton_poi_", KernelKind.POINTWISE),
    # cuDNN's SDPA backward prepares dO.O and converts dQ in kernels of their own.
    pattern(
        "attention",
        r"(?i)flash|fmha|sdpa|attention|cudnn::fusion::(convert_dq|compute_dot_do_o)",
        KernelKind.ATTENTION,
    ),
    pattern("gemm", r"(?i)gemm|gemv|nvjet|cublas|xmma", KernelKind.GEMM),
    pattern(
        "reduction",
        r"(?i)reduc|norm(?!al)|sum|amax|amin|arg(max|min)|softmax",
        KernelKind.REDUCTION,
    ),
    pattern(
        "elementwise",
        r"(?i)elementwise|vectorized|unrolled|CatArrayBatchedCopy|copy_kernel",
        KernelKind.POINTWISE,
    ),
    pattern("OTHER", r"", KernelKind.OTHER),
)


def kernel_kind(name: str) -> KernelKind:
    """The kind of the device event called ``name`` (a kernel, copy or set)."""
    return KernelKind(first_match(KERNEL_TABLE, name))


def matching_row(name: str) -> str:
    """The name of the table's row that decides ``name``'s kind."""
    return next(row.name for row in KERNEL_TABLE if row.regex.search(name))
