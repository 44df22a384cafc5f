"""Measure named configurations in one run, each in fresh processes, and compare them.

    python -m autotune.benchmarks.gpu_suite --out $OUT --preset full --nproc 1 \
        --configs stock step_graph region_graph precision_fp16_frozen

Every configuration is trained from the same seed on the same data by ``autotune.train.launch``
(warm-up, then measured steps with the device synchronised); the loss parity of each against
``stock`` is computed from the same runs (``autotune.train.verify.compare``). ``--model-bench``
adds the issue-2 measurement: the stock model with one batch already on the GPU, 20 eager steps.
Results go to ``OUT/suite-<nproc>.json``; a table is printed last.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from autotune.config import TrainConfig, config_from_dict
from autotune.train.launch import launch
from autotune.train.verify import compare, tolerance_for

ALL_REGIONS = ["vision", "connector", "llm_frozen", "llm_trainable", "vlln", "dit", "projectors"]

CONFIGS: dict[str, dict] = {
    "stock": {},
    "step_graph": {"graphs": {"mode": "step"}},
    "region_graph": {"graphs": {"mode": "regions", "regions": ALL_REGIONS}},
    "precision_fp16_frozen": {"precision": {"regions": {"vision": "fp16", "connector": "fp16", "llm_frozen": "fp16"}}},
    "data_prefetch": {"data": {"num_workers": 8, "device_prefetch": 2, "prefetch_factor": 4}},
    "static_fused_prefetch": {"ddp": {"static_graph": True}, "optimizer": {"impl": "fused"},
                              "data": {"num_workers": 8, "device_prefetch": 2}},
    "step_graph_tuned": {"graphs": {"mode": "step"}, "optimizer": {"impl": "fused"},
                         "data": {"num_workers": 8, "device_prefetch": 2, "prefetch_factor": 4}},
    "compile_all": {"compile": {"regions": ["all"]}},
}


def build(name: str, preset: str, source: str, backend: str, batch: int) -> TrainConfig:
    over = json.loads(json.dumps(CONFIGS[name]))
    data = over.setdefault("data", {})
    data.setdefault("source", source)
    data.setdefault("video_backend", backend)
    return config_from_dict({"preset": preset, "batch_size": batch, **over})


def model_bench(preset: str, batch: int, steps: int) -> dict:
    """Stock model, one batch already on the GPU, eager steps after warm-up (no data path)."""
    import torch

    from autotune.config.stock import stock_config
    from autotune.train.measure import Stats, StepTimer, matmul_rate, peak_memory, reset_peak_memory
    from autotune.train.session import Session

    s = Session(stock_config(preset=preset))
    b = s.workload.synthetic_batch(preset, batch, s.device, torch.Generator().manual_seed(0))
    for _ in range(5):
        s.step(b)
    reset_peak_memory(s.device)
    timer = StepTimer(s.device)
    timer.start()
    for _ in range(steps):
        s.step(b)
        timer.lap()
    times, wall = timer.finish()
    stats = Stats.of(times)
    med = stats.median
    rate = matmul_rate(s.device)
    flops = s.workload.flops_per_sample(preset)
    return {"name": "model_bench_eager_on_device", "step_time_ms": med * 1e3,
            "step_time_spread_ms": {"min": stats.minimum * 1e3, "max": stats.maximum * 1e3,
                                    "p10": stats.p10 * 1e3, "p90": stats.p90 * 1e3},
            "samples_per_s": batch / med, "mfu": flops * batch / med / rate, "matmul_tflops": rate / 1e12,
            "peak_memory_bytes": peak_memory(s.device)["allocated"], "steps": steps, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", default="full")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--source", default="lerobot")
    ap.add_argument("--video-backend", default="pyav")
    ap.add_argument("--configs", nargs="+", default=["stock", "step_graph", "region_graph", "precision_fp16_frozen"])
    ap.add_argument("--model-bench", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"suite-{args.nproc}.json"
    results: dict = {"args": vars(args), "runs": {}}
    if args.source == "lerobot":
        # Made here, once, so that no training process encodes video (and then forks loader
        # workers while the encoder's threads exist) and the dataset is outside every timing.
        from autotune.data.cache import cached_dataset, spec_for
        from autotune.workloads.gr00t_n16.presets import get_preset

        t0 = time.time()
        print(f"dataset: {cached_dataset(spec_for(get_preset(args.preset), TrainConfig().data.episodes))} "
              f"({time.time() - t0:.1f} s)", flush=True)
    if args.model_bench:
        t0 = time.time()
        try:
            results["model_bench"] = model_bench(args.preset, args.batch_size, args.steps)
        except Exception as exc:  # noqa: BLE001  keep going: the other measurements still count
            results["model_bench"] = {"error": f"{type(exc).__name__}: {exc}"}
        results["model_bench"]["elapsed_s"] = time.time() - t0
        path.write_text(json.dumps(results, indent=1))
    for name in args.configs:
        cfg = build(name, args.preset, args.source, args.video_backend, args.batch_size)
        t0 = time.time()
        with tempfile.NamedTemporaryFile(suffix=".log") as log:
            res = launch(cfg, steps=args.steps, warmup=args.warmup, nproc=args.nproc, timeout=args.timeout, log_path=log.name)
            if "error" in res:
                res["log_tail"] = Path(log.name).read_text()[-3000:]
        res["elapsed_s"] = time.time() - t0
        res["overrides"] = CONFIGS[name]
        res.pop("config", None)
        results["runs"][name] = res
        if name != "stock" and "error" not in res and "error" not in results["runs"].get("stock", {"error": 1}):
            res["parity"] = compare(results["runs"]["stock"], res, tolerance_for(cfg)).to_dict()
            for k in ("stock_losses", "losses", "stock_grad_norms", "grad_norms"):
                res["parity"].pop(k)
        path.write_text(json.dumps(results, indent=1))
        print(f"[{time.strftime('%X')}] {name}: " + (f"ERROR {res['reason']}: {res['error']}" if "error" in res else
              f"{res['samples_per_s']:.2f} samples/s, {res['step_time_ms']:.1f} ms"), flush=True)
    _table(results)


def _table(results: dict) -> None:
    stock = results["runs"].get("stock", {})
    base = stock.get("samples_per_s")
    if "model_bench" in results:
        m = results["model_bench"]
        print("model bench:", json.dumps({k: v for k, v in m.items() if not isinstance(v, dict)}))
    print(f"{'config':<24}{'samples/s':>10}{'step ms':>9}{'p10-p90':>14}{'peak GiB':>9}{'MFU%':>6}{'x stock':>8}  parity")
    for name, r in results["runs"].items():
        if "error" in r:
            print(f"{name:<24} ERROR ({r['reason']}) {r['error'][:150]}")
            continue
        s = r["step_time_spread_ms"]
        par = r.get("parity")
        ptxt = "-" if not par else f"{'PASS' if par['passed'] else 'FAIL'} loss {100 * par['loss_rel_diff']:.1f}% gn {100 * par['grad_norm_rel_diff']:.1f}%"
        speed = f"{r['samples_per_s'] / base:.2f}" if base else "-"
        print(f"{name:<24}{r['samples_per_s']:>10.2f}{r['step_time_ms']:>9.1f}{s['p10']:>7.0f}-{s['p90']:<6.0f}"
              f"{r['peak_memory_bytes'] / 2**30:>9.1f}{100 * r['mfu']:>6.1f}{speed:>8}  {ptxt}")


if __name__ == "__main__":
    main()
