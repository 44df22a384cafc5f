"""The memset nodes of a step graph and what they cost, and whether two traces ran the same GEMM kernels.
Usage: python memsets.py TRACE.json.gz [OTHER.json.gz]

For the second profiled step of TRACE (the compute stream: the loader's copy stream left out), each memset
is counted by the kind of kernel that follows it, with its cost: its own time plus the gaps before and
after it. With OTHER, the GEMM kernels of both traces (names and counts over the whole trace) are compared.
"""
import collections
import gzip
import json
import sys


def events(path):
    return json.load(gzip.open(path))["traceEvents"]


def is_gemm(name):
    return name.startswith("nvjet") or "gemm" in name.lower() or "splitK" in name


def kind(name):
    if is_gemm(name):
        return "GEMM"
    if "cudnn" in name or "sdpa" in name:
        return "cuDNN attention"
    return "other"


def memsets(ev):
    step = [e for e in ev if e.get("name", "").startswith("ProfilerStep")][1]
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    copy = {e["args"]["stream"] for e in gpu if "HtoD" in e["name"]}
    a, b = step["ts"], step["ts"] + step["dur"]
    ks = sorted((e for e in gpu if a <= e["ts"] < b and e["args"]["stream"] not in copy), key=lambda e: e["ts"])
    count, cost = collections.Counter(), collections.Counter()
    for x, m, y in zip(ks, ks[1:], ks[2:]):
        if m["cat"] == "gpu_memset":
            k = kind(y["name"])
            count[k] += 1
            cost[k] += (m["ts"] - x["ts"] - x["dur"]) + m["dur"] + (y["ts"] - m["ts"] - m["dur"])
    return count, cost


def gemms(ev):
    return collections.Counter(e["name"] for e in ev if e.get("cat") == "kernel" and is_gemm(e["name"]))


first = events(sys.argv[1])
count, cost = memsets(first)
print(sys.argv[1])
for k in count:
    print(f"  memsets before {k}: {count[k]}, {cost[k] / 1e3:.2f} ms with their gaps ({cost[k] / count[k]:.1f} us each)")
print(f"  all: {sum(count.values())}, {sum(cost.values()) / 1e3:.2f} ms")
if len(sys.argv) > 2:
    a, b = gemms(first), gemms(events(sys.argv[2]))
    print(f"GEMM kernels: {len(a)} names against {len(b)}; same names and counts: {a == b}")
