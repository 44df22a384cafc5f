"""What each trace event is, written as data.

Three ordered tables of named, compiled patterns; in each, the first match wins and the last row
is an explicit catch-all. Patterns are applied once per *distinct* string (a trace has a few
thousand distinct names among millions of events), then broadcast to the events by id.

* :data:`CATEGORY_TABLE` sorts events by their ``cat`` field into host operators, host
  annotations, runtime calls, device activity, events that only say a GPU was traced, other
  accelerators' activity, and events we ignore. Both of Kineto's spellings are read: today's
  (``cpu_op``, ``cuda_runtime``, ``kernel``, ``gpu_memcpy``, ...) and that of 2021
  (``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``).
* :data:`LEGACY_ANNOTATION` finds the ``record_function`` spans among 2021-format ``Operator``
  events, which did not tell them apart by category.
* :data:`DEVICE_TABLE` sorts device activity (kernels, memcpy, memset) by name into
  communication, memory and compute.
* :data:`HOST_TABLE` sorts host operators and annotations by name into step markers, data waits,
  collectives, dispatch-only operators and compute operators, and finds the runtime calls that
  replay a CUDA graph or block the host until the device catches up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum

import numpy as np


class Category(IntEnum):
    """Where an event happens, from its ``cat``."""

    HOST_OP = 0  # cpu_op: an ATen operator or autograd node on a host thread
    ANNOTATION = 1  # user_annotation: record_function spans, ProfilerStep#N, gloo:all_reduce
    RUNTIME = 2  # cuda_runtime / cuda_driver: the host side of a launch, copy or sync
    DEVICE = 3  # kernel, gpu_memcpy, gpu_memset: work on a device stream
    IGNORED = 4  # python_function, counters, ...
    GPU_SIDE = 5  # not read, but only a GPU trace has them: gpu_user_annotation, ac2g flows
    ACCELERATOR = 6  # another accelerator's activity (MTIA, XPU, HPU, ...): not classified
    LEGACY_OP = 7  # 2021 format's Operator: an operator or a record_function span, by name


class DeviceKind(IntEnum):
    COMM = 0
    MEMORY = 1
    COMPUTE = 2


class HostKind(IntEnum):
    STEP = 0  # ProfilerStep#N
    DATA = 1  # waiting on the data loader
    COMM = 2  # a collective on the host (gloo, c10d)
    DISPATCH = 3  # does no arithmetic of its own: views, allocation, wrappers, autograd engine
    COMPUTE = 4  # the catch-all: an operator that computes (self time)
    GRAPH_LAUNCH = 5  # a runtime call that replays a CUDA (HIP) graph
    LAUNCH = 6  # a runtime call that puts one kernel, copy or set on a stream
    SYNC = 7  # a runtime call that returns only once the device has caught up


@dataclass(frozen=True)
class Pattern:
    """One row of a table: a name, a compiled regular expression and the kind it assigns."""

    name: str
    regex: re.Pattern[str]
    kind: int


def pattern(name: str, regex: str, kind: int) -> Pattern:
    """A row of a table, its regular expression compiled."""
    return Pattern(name, re.compile(regex), kind)


CATEGORY_TABLE: tuple[Pattern, ...] = (
    pattern("host operator", r"^cpu_op$", Category.HOST_OP),
    pattern("host annotation", r"^user_annotation$", Category.ANNOTATION),
    pattern(
        "runtime call", r"^(cuda_runtime|cuda_driver|hip_runtime|hip_driver)$", Category.RUNTIME
    ),
    pattern(
        "device activity", r"^(kernel|gpu_memcpy|gpu_memset|Kernel|Memcpy|Memset)$", Category.DEVICE
    ),
    pattern("2021 operator or span", r"^Operator$", Category.LEGACY_OP),
    pattern("2021 runtime call", r"^Runtime$", Category.RUNTIME),
    pattern(
        "gpu-side marker",
        r"^(gpu_user_annotation|ac2g|cuda_sync|cuda_profiler_range)$",
        Category.GPU_SIDE,
    ),
    pattern(
        "other accelerator",
        r"^(mtia_|xpu_|hpu_|privateuse1_|glow_runtime$)",
        Category.ACCELERATOR,
    ),
    pattern("OTHER", r"", Category.IGNORED),
)

LEGACY_ANNOTATION = re.compile(r"#")
"""A 2021-format ``Operator`` whose name has a ``#`` is a ``record_function`` span torch named
(``ProfilerStep#5``, ``enumerate(DataLoader)#..._next__``, ``Optimizer.step#SGD.step``); operator
and autograd-node names never have one. A user's own ``record_function("fwd")`` is read as an
operator, a wrapper whose time on a launching thread counts as launch overhead."""

DEVICE_TABLE: tuple[Pattern, ...] = (
    pattern("nccl", r"^nccl|ncclKernel|ncclDevKernel|^rccl", DeviceKind.COMM),
    # Kineto's names of copies and sets; lower-case names are kernels (memcpy32_post of graphs).
    pattern("memcpy/memset", r"^(hip)?(Memcpy|Memset)", DeviceKind.MEMORY),
    pattern("OTHER", r"", DeviceKind.COMPUTE),
)

HOST_TABLE: tuple[Pattern, ...] = (
    pattern("profiler step", r"^ProfilerStep#\d+$", HostKind.STEP),
    pattern("data loader next", r"^enumerate\(DataLoader\)#.*__next__$", HostKind.DATA),
    pattern("autotune data wait", r"^autotune\.data_wait$", HostKind.DATA),
    pattern(
        "collective",
        r"^(gloo:|nccl:|c10d::|c10d_functional::|_c10d_functional::|record_param_comms$)",
        HostKind.COMM,
    ),
    pattern(
        "autograd engine", r"^autograd::engine::|Backward\d*$|^torch::autograd::", HostKind.DISPATCH
    ),
    pattern(
        "ddp reducer wrapper",
        r"^(torch\.distributed\.ddp\.reducer::|torch::distributed::reducer::)",
        HostKind.DISPATCH,
    ),
    pattern(
        "view or allocation",
        r"^aten::(view|_unsafe_view|reshape|_reshape_alias|as_strided|t|transpose|permute|expand"
        r"|expand_as|unsqueeze|squeeze|detach|detach_|alias|resolve_conj|resolve_neg|select"
        r"|slice|narrow|split|split_with_sizes|chunk|unbind|flatten|unflatten|contiguous"
        r"|empty|empty_like|empty_strided|new_empty|new_empty_strided|resize_|lift_fresh"
        r"|to|_to_copy|type_as|numpy_T|broadcast_tensors|result_type|size|stride|dim"
        r"|is_nonzero|item|_local_scalar_dense|linear|matmul|zeros|zeros_like|ones|ones_like"
        r"|full|full_like|scalar_tensor|set_|record_stream)$",
        HostKind.DISPATCH,
    ),
    pattern("graph launch", r"^(cuda|cu|hip)GraphLaunch", HostKind.GRAPH_LAUNCH),
    # Calls that wait for the device by contract. cudaMemcpyAsync also blocks when its host
    # memory is pageable: that is read from its copy's name (autotune.profiling.sync).
    pattern(
        "synchronise",
        r"^(cuda|cu|hip)(Device|Stream|Event|Ctx)Synchronize"
        r"|^(cuda|hip)Memcpy(2D|3D)?(WithStream)?(_v\d+)?$|^cuMemcpy(DtoH|HtoD|DtoD)?(_v\d+)?$",
        HostKind.SYNC,
    ),
    pattern("launch, copy or set", r"^(cuda|cu|hip)(Launch|Memcpy|Memset)", HostKind.LAUNCH),
    pattern("OTHER", r"", HostKind.COMPUTE),
)


def first_match(table: tuple[Pattern, ...], text: str) -> int:
    for row in table:
        if row.regex.search(text):
            return row.kind
    raise AssertionError(f"table without a catch-all row; {text!r} matched nothing")


def kinds_of(table: tuple[Pattern, ...], names: list[str]) -> np.ndarray:
    """The kind of each distinct name, as an int8 array indexed by name id."""
    return np.fromiter((first_match(table, n) for n in names), dtype=np.int8, count=len(names))
