"""What a real GPU trace holds around CUDA-graph replays, read from the raw JSON (not our loader).

The GPU tests print this census and put it in their failure messages, so that a failure on the
GPU machine says which trace shape the profiler wrote: graph kernels correlated with their
``cudaGraphLaunch``, with ids that match no call, without ids, or not traced at all.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path
from statistics import median
from typing import Any

import pytest

RUNTIME = ("cuda_runtime", "cuda_driver")
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")
EAGER_LAUNCH = re.compile(r"Launch|Memcpy|Memset")


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]


def _relation(ev: dict, graph_ids: set, call_ids: set) -> str:
    corr = (ev.get("args") or {}).get("correlation")
    if corr is None:
        return "no_correlation"
    if corr in graph_ids:
        return "graph_launch"
    return "other_call" if corr in call_ids else "unmatched"


def _timing(span: dict, device: list[dict], launches: list[dict]) -> dict[str, float]:
    """Where a step's time went, in µs: whether the device waited on the host's graph launch
    (kernels spaced by the launch call's pace) or ran back to back."""
    runs = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in device)
    busy, gaps, reach = 0.0, [], None
    for start, end in runs:
        if reach is not None:
            gaps.append(max(start - reach, 0.0))
        busy += max(end - max(start, reach if reach is not None else start), 0.0)
        reach = end if reach is None else max(reach, end)
    first_launch = min((e["ts"] for e in launches), default=None)
    return {
        "window_us": round(span.get("dur", 0), 1),
        "graph_launch_call_us": round(sum(e.get("dur", 0) for e in launches), 1),
        "first_kernel_after_launch_us": round(runs[0][0] - first_launch, 1)
        if runs and first_launch is not None
        else None,
        "device_busy_us": round(busy, 1),
        "median_kernel_us": round(median(e - s for s, e in runs), 2) if runs else None,
        "median_gap_us": round(median(gaps), 2) if gaps else None,
    }


def census(path: str | Path) -> dict[str, Any]:
    """Counts per ``ProfilerStep`` span: device events starting in it, by how they are correlated,
    and their timing (:func:`_timing`).

    ``device_events`` are all of them; ``graph_kernels`` are those less one per launch call of the
    step that is not a graph launch (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ...): the replayed
    graph's kernels, counted without trusting any correlation id.
    """
    events = _events(Path(path))
    runtime = [e for e in events if e.get("cat") in RUNTIME]
    call_ids = {(e.get("args") or {}).get("correlation") for e in runtime}
    launches = [e for e in runtime if "GraphLaunch" in e.get("name", "")]
    graph_ids = {(e.get("args") or {}).get("correlation") for e in launches}
    eager = [e for e in runtime if EAGER_LAUNCH.search(e.get("name", "")) and e not in launches]
    device = [e for e in events if e.get("cat") in DEVICE]
    spans: dict[str, dict] = {}
    for e in events:
        if e.get("name", "").startswith("ProfilerStep#") and e.get("cat") in (
            "user_annotation",
            "cpu_op",
        ):
            spans.setdefault(e["name"], e)
    steps, inside = [], 0
    for name, span in sorted(spans.items(), key=lambda kv: kv[1]["ts"]):
        lo, hi = span["ts"], span["ts"] + span.get("dur", 0)
        mine = [e for e in device if lo <= e["ts"] < hi]
        inside += len(mine)
        how = Counter(_relation(e, graph_ids, call_ids) for e in mine)
        steps.append(
            {
                "step": name,
                "device_events": len(mine),
                "graph_kernels": len(mine) - sum(lo <= e["ts"] < hi for e in eager),
                "correlation": dict(how),
                "graph_launches": sum(lo <= e["ts"] < hi for e in launches),
                "streams": sorted({(e.get("args") or {}).get("stream") for e in mine}, key=str),
                **_timing(span, mine, [e for e in launches if lo <= e["ts"] < hi]),
            }
        )
    graph_args = sorted({k for e in device for k in (e.get("args") or {}) if "graph" in k.lower()})
    return {
        "categories": dict(Counter(e.get("cat") for e in events)),
        "graph_launch_names": sorted({e["name"] for e in launches}),
        "graph_launches": len(launches),
        "device_events": len(device),
        "device_events_outside_steps": len(device) - inside,
        "device_graph_args": graph_args,
        "steps": steps,
    }


class GraphKernelsNotTraced(AssertionError):
    """The trace holds graph launches but none of the replayed kernels (a profiler limitation)."""


def check_graph_replays(folder: Path, want: int) -> str:
    """Assert that each step of the rank-0 trace in ``folder`` replays ``want`` graph kernels and
    that the classifier counts every device event of each step; returns the census as text.

    Every failure message carries the census. Raises :class:`GraphKernelsNotTraced` when the
    trace holds no graph kernel at all, or no CUDA activity at all.
    """
    import torch

    from autotune.profiling import classify

    found = census(folder / "rank0.pt.trace.json.gz")
    facts = f"torch {torch.__version__}, CUDA {torch.version.cuda}; census {json.dumps(found)}"
    if not found["device_events"] and not any(c in found["categories"] for c in RUNTIME):
        raise GraphKernelsNotTraced(f"the profiler recorded no CUDA activity at all; {facts}")
    if not any(s["graph_kernels"] for s in found["steps"]):
        raise GraphKernelsNotTraced(
            f"the profiler traced none of the replayed graph's kernels; {facts}"
        )
    assert found["graph_launches"] >= 1, f"no cudaGraphLaunch call in the trace; {facts}"
    graph_kernels = [s["graph_kernels"] for s in found["steps"]]
    assert graph_kernels == [want] * len(graph_kernels), (
        f"the trace holds {graph_kernels} graph kernels per step, not {want}; {facts}"
    )
    got = classify(folder)
    per_step = [s.kernels for s in got.ranks[0].steps]
    in_trace = [s["device_events"] for s in found["steps"]]
    assert per_step == in_trace, (
        f"the classifier counts {per_step} kernels per step, the trace has {in_trace}; {facts}"
    )
    assert got.device == "gpu", facts
    compute = [s.buckets_ns["compute_serial"] / 1000 for s in got.ranks[0].steps]
    busy = [s["device_busy_us"] for s in found["steps"]]
    assert compute == pytest.approx(busy, abs=0.5), (
        f"the classifier's compute time per step {compute} µs is not the device's busy time {busy}; {facts}"
    )
    # The test graph's kernels are long enough for the device, not the host's graph launch, to
    # pace the replay; the timing in the census says which one did.
    assert got.dominant == "compute_serial", f"buckets {got.buckets}; {facts}"
    return facts
