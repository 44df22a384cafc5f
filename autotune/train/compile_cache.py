"""A compile cache that the runs of one study share: Inductor's, AOTAutograd's and Triton's, in one folder.

``torch.compile`` keeps compiled artefacts on disk: Inductor's FX graph cache (the generated code of
a graph, keyed by the graph and its inputs) and AOTAutograd's cache (the forward and backward graphs
it made from the traced one) under ``TORCHINDUCTOR_CACHE_DIR``, and Triton's compiled kernels under
``TRITON_CACHE_DIR``. Both caches are on by default in torch 2.11 and 2.13 (``fx_graph_cache``,
``enable_autograd_cache``); the environment variables ``TORCHINDUCTOR_FX_GRAPH_CACHE`` and
``TORCHINDUCTOR_AUTOGRAD_CACHE`` force them. Every run is a fresh process, so without a shared
folder a study only reuses what happens to be left in ``/tmp/torchinductor_USER``; with
:func:`cache_env` a trial that compiles the same graphs as an earlier one (a loader or optimizer
knob changed, the winner confirmed again) loads them instead of compiling them, and a continued
study finds them in its run folder. Dynamo still traces the model in each process: what the cache
saves is AOTAutograd's and Inductor's work and Triton's kernel compiles
(``python -m autotune.benchmarks.compile_cache`` measures how much). AOTAutograd's cache takes only
graphs whose every call it knows to be safe: :func:`cache_autocast_graphs` adds autocast's enter and
exit (torch 2.13 refuses them, so every graph with a precision region), and the frozen fp8 layers run
plain tensor operations (:mod:`autotune.train.fp8_static`). A graph that still holds torchao's fp8
training layers (a trained region in fp8: its config records are built in the graph and its matmul
is an ``allow_in_graph`` autograd function; the counters say ``autograd_cache_bypass``) is traced and
partitioned again by each run, with only Inductor's and Triton's caches.
"""

from __future__ import annotations

import os
from pathlib import Path

FOLDER = "compile_cache"
"""The cache's folder inside a run folder."""


def cache_env(folder: str | os.PathLike, keep_user: bool = True) -> dict[str, str]:
    """Environment variables that put every compile cache of a run under ``folder`` (absolute, so that
    a run started from another working folder finds it), with both caches forced on.

    With ``keep_user``, a variable the user set in this process's environment is left out: theirs
    stays in force.
    """
    root = Path(folder).resolve()
    env = {
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "TRITON_CACHE_DIR": str(root / "triton"),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
    }
    return {k: v for k, v in env.items() if not (keep_user and k in os.environ)}


AUTOCAST_CALLS = (
    "torch.amp.autocast_mode._enter_autocast",
    "torch.amp.autocast_mode._exit_autocast",
)
"""The calls by which Dynamo records an autocast region in a graph."""


def cache_autocast_graphs() -> None:
    """Let AOTAutograd cache a graph that enters an autocast region (every region of a precision map
    is one). torch 2.13's cache check refuses any call not on its list, and autocast's enter and exit
    are private functions, so such a graph is traced and partitioned again by every process
    (pytorch/pytorch#191106). What they do is fixed by their arguments (device, dtype, enabled,
    weight cache), constants of the graph that its cache key hashes: a graph compiled under one
    autocast setting is never served for another. Call before compiling; the names go into the
    Inductor configuration, which the keys hash too."""
    import torch._inductor.config as inductor

    marked = getattr(inductor, "unsafe_marked_cacheable_functions", None)
    if isinstance(marked, dict):
        for name in AUTOCAST_CALLS:
            marked.setdefault(name, "autocast")


def cache_counters() -> dict[str, int]:
    """This process's cache hits, misses and bypasses so far (Inductor's FX graph cache, AOTAutograd's)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return {}
    out = {}
    for group, prefix in (("inductor", "fxgraph_cache_"), ("aot_autograd", "autograd_cache_")):
        for key, value in counters.get(group, {}).items():
            if key.startswith(prefix) and key.rsplit("_", 1)[-1] in ("hit", "miss", "bypass"):
                out[key] = int(value)
    return out
