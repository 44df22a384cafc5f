"""Warm-up steps that run the code the CUDA-graph capture of the step will run.

A library may branch on whether a stream is being captured: transformers' ``is_tracing`` counts
stream capture as tracing, so a Hugging Face model builds its attention mask as a tensor while a
step is captured and leaves it ``None`` (SDPA's causal path) in the eager warm-up steps before. A
region compiled in warm-up then meets, inside the capture, an input it has no graph for; Dynamo
recompiles there, where Inductor may not copy a host tensor to the device (on an H200: "Cannot copy
between CPU and CUDA tensors during CUDA graph capture"). Inside :func:`capture_path` such checks
answer "capturing", so warm-up and capture take one path; after capture the step is only replayed.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

CHECKS = (("transformers.utils.import_utils", "is_cuda_stream_capturing"),)
"""(module, function) of the capture checks answered "capturing"; a module not imported is left alone
(a model that does not use the library never imports it)."""


def _capturing() -> bool:
    return True


@contextlib.contextmanager
def capture_path() -> Iterator[list[str]]:
    """Within: the capture checks of :data:`CHECKS` answer True; yields the names patched."""
    saved = []
    for module_name, name in CHECKS:
        module = sys.modules.get(module_name)
        if module is not None and callable(getattr(module, name, None)):
            saved.append((module, name, getattr(module, name)))
            setattr(module, name, _capturing)
    try:
        yield [f"{m.__name__}.{n}" for m, n, _ in saved]
    finally:
        for module, name, original in saved:
            setattr(module, name, original)
