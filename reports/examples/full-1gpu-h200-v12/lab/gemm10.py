"""Probe: q/k/v of the frozen towers as 3 GEMMs against one with the weights side by side (full's shapes,
bf16, CUDA graph of 20 layers' worth, medians of 15 replays)."""
import json, sys, statistics, torch
torch.backends.cuda.matmul.allow_tf32 = True
dev = "cuda"
def bench(fn, reps=15):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.current_stream().wait_stream(s); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g): fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts)
out = {}
for name, M, K, Ns, bias, layers in [("vision", 10368, 1152, (1152, 1152, 1152), True, 27), ("llm_frozen", 3520, 2048, (2048, 1024, 1024), False, 12)]:
    x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    ws = [torch.randn(n, K, device=dev, dtype=torch.bfloat16) * 0.02 for n in Ns]
    bs = [torch.randn(n, device=dev, dtype=torch.bfloat16) if bias else None for n in Ns]
    wf = torch.cat(ws); bf = torch.cat(bs) if bias else None
    sep = lambda: [torch.nn.functional.linear(x, w, b) for _ in range(layers) for w, b in zip(ws, bs)]
    fus = lambda: [torch.nn.functional.linear(x, wf, bf).split(list(Ns), -1) for _ in range(layers)]
    r = {}
    for k, f in (("separate", sep), ("fused", fus), ("separate2", sep), ("fused2", fus)):
        r[k] = bench(f)
    ref = [torch.nn.functional.linear(x, w, b) for w, b in zip(ws, bs)]
    got = torch.nn.functional.linear(x, wf, bf).split(list(Ns), -1)
    r["max_abs_diff"] = max((a - b).abs().max().item() for a, b in zip(ref, got))
    r["equal"] = all(torch.equal(a, b) for a, b in zip(ref, got))
    out[name] = r
    print(name, r, flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
