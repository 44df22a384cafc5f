"""How much the profiling window records: every operator, or only the spans the classifier needs.

``profile_window(detail=...)`` takes one of :data:`DETAILS`:

* ``"ops"``: every ATen operator and autograd node (``cpu_op`` events), each linked to the
  kernels it launched (Kineto's external correlation). The trace to read by operator in
  Perfetto; CPU-only traces need it, since their buckets come from the operators.
* ``"spans"``: only ``record_function`` spans (``ProfilerStep#N``, ``autotune.data_wait``, the
  DataLoader's ``__next__``, optimizer steps), the CUDA runtime calls with their correlation
  ids, and the device's kernels, copies and sets; no external correlation. For GPU runs: a
  CPU-only trace without operators cannot be classified (the classifier says so).
  What the GPU classifier loses: "a launching thread is inside an operator" no longer marks
  launch overhead, so a device gap longer than ``launch_gap_max_us`` with the host inside an
  operator (not a runtime call) counts as ``other``. On H200 traces of ``full`` that moved
  0 to 2.9 points of step time from launch_overhead to other and changed no dominant bucket.
* ``"auto"`` (the default): ``"spans"`` when the window profiles CUDA and this torch has the
  private hooks it needs (:func:`spans_supported`), ``"ops"`` otherwise.

Why ``spans`` is cheaper: with every operator recorded, each of the ~37,000 host operators of an
eager ``full`` step runs the profiler's RecordFunction callback (a timestamped event, plus a
push and pop of the external correlation id into CUPTI); on the CPU machine that alone cost
~0.64 µs per operator (tiny preset: +24.9 % per step with ``ops``, none measurable with
``spans``). ``torch.profiler`` has no public switch
for that; the C++ ``_enable_profiler`` takes the record scopes to observe (pytorch/pytorch
#127215), so the window passes ``{USER_SCOPE}`` through it while the window runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from autotune.errors import ConfigError

DETAILS = ("auto", "ops", "spans")


def resolve_detail(detail: str, cuda: bool) -> str:
    """The detail a window records: ``"ops"`` or ``"spans"``."""
    if detail not in DETAILS:
        raise ConfigError(f"profile_window.detail: {detail!r} is not one of {list(DETAILS)}")
    if detail == "auto":
        return "spans" if cuda and spans_supported() else "ops"
    return detail


def spans_supported() -> bool:
    """Whether this torch has the private hooks ``spans`` relies on (checked on 2.13; a torch
    without them records every operator instead of failing the window)."""
    try:
        import torch.autograd.profiler as autograd_profiler
        from torch._C._profiler import RecordScope, _ExperimentalConfig

        _ExperimentalConfig(disable_external_correlation=True)
        return callable(getattr(autograd_profiler, "_enable_profiler", None)) and hasattr(
            RecordScope, "USER_SCOPE"
        )
    except (ImportError, TypeError, AttributeError, RuntimeError):
        return False


def profiler_options(detail: str) -> dict[str, Any]:
    """Extra keyword arguments of ``torch.profiler.profile`` for a resolved detail."""
    if detail == "ops":
        return {}
    from torch._C._profiler import _ExperimentalConfig

    return {"experimental_config": _ExperimentalConfig(disable_external_correlation=True)}


@contextmanager
def recorded_scopes(detail: str) -> Iterator[None]:
    """While open, profilers started in this process observe only ``record_function`` spans
    (``detail == "spans"``); with ``"ops"``, every scope, as ``torch.profiler`` does."""
    if detail == "ops":
        yield
        return
    import torch.autograd.profiler as autograd_profiler
    from torch._C._profiler import RecordScope

    enable = autograd_profiler._enable_profiler

    def enable_user_scope(config, activities, scopes=None):
        return enable(config, activities, {RecordScope.USER_SCOPE})

    autograd_profiler._enable_profiler = enable_user_scope
    try:
        yield
    finally:
        autograd_profiler._enable_profiler = enable
