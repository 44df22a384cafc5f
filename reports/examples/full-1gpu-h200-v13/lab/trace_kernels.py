"""Kernel time a step by kind, from torch.profiler traces (the steps after the first profiled one, on the
compute stream: the loader's copy stream left out), the first-to-last span, the idle time inside it, and
the gaps between consecutive kernels. Usage: python trace_kernels.py TRACE.json.gz [...]"""
import collections, gzip, json, sys


def kind(n):
    if n.startswith("nvjet") or "gemm" in n.lower() or "cutlass" in n.lower() or "splitKreduce" in n:
        return "GEMM"
    if "sdpa" in n or "flash" in n or "fmha" in n or "cudnn" in n:
        return "attention"
    if "adamw" in n:
        return "optimizer update"
    if "sumsq" in n or "multi_tensor" in n or ("norm" in n.lower() and "at::native" in n):
        return "gradient norm"
    if n.startswith(("triton_per", "triton_red")):
        return "Inductor reductions"
    if n.startswith("triton_poi"):
        return "Inductor pointwise"
    if "Memset" in n:
        return "memset"
    if "Memcpy" in n:
        return "memcpy"
    return "other"


for path in sys.argv[1:]:
    ev = json.load(gzip.open(path))["traceEvents"]
    steps = [e for e in ev if e.get("name", "").startswith("ProfilerStep")][1:]
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    copy_streams = {e["args"]["stream"] for e in gpu if "HtoD" in e["name"]}
    per = collections.defaultdict(lambda: [0.0, 0.0])
    spans, idles, counts, gaps, memset_bytes = [], [], [], collections.Counter(), collections.Counter()
    for s in steps:
        a, b = s["ts"], s["ts"] + s["dur"]
        ks = sorted((e for e in gpu if a <= e["ts"] < b and e["args"]["stream"] not in copy_streams), key=lambda e: e["ts"])
        for e in ks:
            per[kind(e["name"])][0] += e["dur"] / 1e3 / len(steps)
            per[kind(e["name"])][1] += 1 / len(steps)
            if e["cat"] == "gpu_memset":
                memset_bytes[e["args"].get("bytes")] += 1
        for x, y in zip(ks, ks[1:]):
            gaps[min(int(y["ts"] - x["ts"] - x["dur"]), 10)] += 1
        span = (ks[-1]["ts"] + ks[-1]["dur"] - ks[0]["ts"]) / 1e3
        busy, end = 0.0, ks[0]["ts"]
        for e in ks:
            busy += max(0.0, e["ts"] + e["dur"] - max(e["ts"], end))
            end = max(end, e["ts"] + e["dur"])
        spans.append(span), idles.append(span - busy / 1e3), counts.append(len(ks))
    print(path)
    for k, (ms, n) in sorted(per.items(), key=lambda kv: -kv[1][0]):
        print(f"  {k:22s} {ms:7.2f} ms {n:6.0f}")
    print(f"  first to last {sum(spans) / len(spans):.2f} ms, idle {sum(idles) / len(idles):.2f} ms, "
          f"{sum(counts) / len(counts):.0f} kernels a step")
    print("  gaps between kernels (us, 10 = 10 or more):", sorted(gaps.items()))
    print("  memsets by bytes:", dict(memset_bytes))
