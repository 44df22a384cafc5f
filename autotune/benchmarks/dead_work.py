"""Is the discarded LM head computed? Count vocab-sized matmuls in what torch.compile keeps.

The stock replica computes the LM-head logits ([B, L, vocab]) and discards them, as upstream does.
Eager execution and a whole-step CUDA graph run them; whether ``torch.compile`` does depends on what
its graphs keep. This compiles the model as ``compile.regions`` says (default: the whole model),
runs one training step and counts the matmuls whose output has the vocabulary dimension in
Dynamo's graphs (what the Python code asked for) and in Inductor's post-grad graphs (what runs)::

    python -m autotune.benchmarks.dead_work --preset tiny                       # CPU: minutes
    python -m autotune.benchmarks.dead_work --preset full --device cuda --json $OUT/dead-work.json

On torch 2.13 (CPU, tiny, the whole model compiled): Dynamo's graph has the one logits matmul,
Inductor's forward and backward graphs none (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

MATMULS = ("mm", "addmm", "bmm", "linear", "matmul")


def _vocab_matmuls(gm: torch.fx.GraphModule, vocab: int, meta_key: str) -> int:
    n = 0
    for node in gm.graph.nodes:
        name = str(node.target).split(".")[-1].split(" ")[-1]
        val = node.meta.get(meta_key)
        if node.op == "call_function" and any(m in name for m in MATMULS) and hasattr(val, "shape"):
            n += vocab in tuple(val.shape)
    return n


def count(preset: str, device: str, regions: list[str], skip_dead_work: bool) -> dict:
    """One step of ``preset`` with ``compile.regions: regions``; the vocab-sized matmuls per graph."""
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx

    from autotune.config import config_from_dict
    from autotune.train.session import Session
    from autotune.workloads.gr00t_n16.presets import get_preset

    vocab = get_preset(preset).vocab_size
    found: dict[str, list[int]] = {"dynamo": [], "inductor_post_grad": []}

    def backend(gm, example_inputs):
        found["dynamo"].append(_vocab_matmuls(gm, vocab, "example_value"))
        return compile_fx(gm, example_inputs)

    def post_grad(graph: torch.fx.Graph) -> None:
        found["inductor_post_grad"].append(_vocab_matmuls(graph.owning_module, vocab, "val"))

    cfg = config_from_dict(
        {
            "preset": preset,
            "batch_size": 2,
            "device": device,
            "data": {"source": "synthetic"},
            "compile": {"regions": regions},
            "model": {"skip_dead_work": skip_dead_work},
        }
    )
    compile_method = torch.nn.Module.compile
    torch.nn.Module.compile = lambda self, **kw: compile_method(self, **{**kw, "backend": backend})
    try:
        with inductor_config.patch(post_grad_custom_post_pass=post_grad):
            session = Session(cfg)
            batch = session.workload.synthetic_batch(
                preset, 2, session.device, torch.Generator().manual_seed(0)
            )
            loss, _ = session.step(batch)
    finally:
        torch.nn.Module.compile = compile_method
    return {
        "preset": preset,
        "device": str(session.device),
        "torch": torch.__version__,
        "compile.regions": regions,
        "skip_dead_work": skip_dead_work,
        "vocab": vocab,
        "vocab_matmuls": found,
        "loss": float(loss),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m autotune.benchmarks.dead_work", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument(
        "--regions", nargs="+", default=["all"], help="compile.regions (default: the whole model)"
    )
    ap.add_argument(
        "--skip-dead-work",
        action="store_true",
        help="with model.skip_dead_work (expect none anywhere)",
    )
    ap.add_argument("--json", type=Path, help="write the counts here")
    args = ap.parse_args(argv)
    out = count(args.preset, args.device, args.regions, args.skip_dead_work)
    text = json.dumps(out, indent=1)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
