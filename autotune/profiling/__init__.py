"""Measure where training steps spend their time.

* :func:`profile_window` runs a window of steps under ``torch.profiler`` and writes one gzipped
  Chrome trace per rank, with the profiler's overhead measured in the same run.
* :func:`classify` splits each step of each rank into compute, exposed communication, launch
  overhead, sync wait, data stall and other time (``python -m autotune classify PATH``).
* :func:`compare_with_hta` cross-checks the classifier against HTA's temporal breakdown.
"""

from autotune.profiling.classify import ClassifyOptions, classify
from autotune.profiling.hta_check import HtaComparison, compare_with_hta
from autotune.profiling.result import (
    BUCKETS,
    ClassifyResult,
    KernelStat,
    LaunchStats,
    RankResult,
    StepResult,
    Straggler,
)
from autotune.profiling.trace import RankTrace, load_trace, load_traces

# The profiling window needs torch; the classifier does not, so it is imported on first use.
_WINDOW_NAMES = ("DATA_WAIT", "ProfileWindowResult", "data_wait", "profile_window")


def __getattr__(name: str):
    if name in _WINDOW_NAMES:
        from autotune.profiling import window

        return getattr(window, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BUCKETS",
    "DATA_WAIT",
    "ClassifyOptions",
    "ClassifyResult",
    "HtaComparison",
    "KernelStat",
    "LaunchStats",
    "ProfileWindowResult",
    "RankResult",
    "RankTrace",
    "StepResult",
    "Straggler",
    "classify",
    "compare_with_hta",
    "data_wait",
    "load_trace",
    "load_traces",
    "profile_window",
]
