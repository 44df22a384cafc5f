"""Known third-party lines that tell an autotune user nothing, dropped where each library emits them.

Each filter names one message of one library, so that anything else the library says still
shows (no blanket silencing of warnings or loggers):

* torchao's ``Failed to load …/_C*.so`` (logger ``torchao``): its wheel ships kernels built for
  other CUDA and Python versions and tries each on import (transformers imports torchao);
  autotune uses none of them, and a missing one its fp8 path needs fails loudly on its own.
* torch's ``_pytree`` deprecation of ``register_constant()`` on Enum subclasses (logger
  ``torch.utils._pytree``), which torchao calls twice on import.
* kineto's ``USDT: … profiler_start`` / ``profiler_stop`` trace-point lines, printed by the C++
  profiler on stderr at every profiled window. Kineto reads its threshold from
  ``$KINETO_LOG_LEVEL`` when the profiler first starts; its trace points sit above its errors, so
  the level that drops them (6) drops kineto's own error lines too: a user who wants those sets
  ``KINETO_LOG_LEVEL`` themselves, which is left as it is.

DDP's ``broadcast_buffers`` FutureWarning is filtered where autotune builds DDP
(:func:`autotune.train.distributed.wrap_ddp`). :func:`install` is called by the command line and
by every process it starts (trial and job workers); library use of autotune changes nothing.
"""

from __future__ import annotations

import logging
import os
import re

KINETO_QUIET = "6"
"""Above kineto's ``USDT`` level (5), the level of its trace-point lines."""

DROPPED = {
    "torchao": re.compile(r"^Failed to load .*\.so\b"),
    "torch.utils._pytree": re.compile(r"is an Enum subclass and is now natively supported"),
}
"""Logger name -> the one message of it that is dropped."""


class _Drop(logging.Filter):
    def __init__(self, pattern: re.Pattern[str]) -> None:
        super().__init__()
        self.pattern = pattern

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.search(record.getMessage())


def install() -> None:
    """Drop the lines above in this process and the processes it starts (idempotent)."""
    for name, pattern in DROPPED.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Drop) for f in logger.filters):
            logger.addFilter(_Drop(pattern))
    os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET)
