"""GPU-only: CUDA graphs and compile on Hugging Face decoder layers (keyword arguments, caches) train as
eager does. Run on the device machine: ``python -m pytest tests/workloads/test_hf_gpu.py``."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
pytest.importorskip("transformers")

from autotune.config import config_from_dict  # noqa: E402
from autotune.train.session import Session  # noqa: E402

EAGER = {"mode": "none"}


def losses(workload: str, steps: int = 6, **knobs) -> list[float]:
    cfg = {
        "workload": workload,
        "preset": "tiny",
        "batch_size": 4,
        "data": {"source": "synthetic"},
        "precision": {"default": "bf16"},
        **knobs,
    }
    s = Session(config_from_dict(cfg))
    batch = s.workload.synthetic_batch("tiny", 4, s.device, torch.Generator().manual_seed(0))
    return [s.step(batch)[0].item() for _ in range(steps)]


@pytest.mark.parametrize(
    "workload, region", [("hf_causal_lm", "layers"), ("image_classifier", "encoder")]
)
@pytest.mark.parametrize(
    "knobs",
    [
        {"graphs": {"mode": "step", "warmup_steps": 2}},
        {"graphs": {"mode": "regions", "regions": ["REGION"]}},
        {"graphs": {"mode": "step", "warmup_steps": 2}, "compile": {"regions": ["REGION"]}},
        {"checkpointing": {"regions": ["REGION"]}, "compile": {"regions": ["all"]}},
    ],
    ids=[
        "step graph",
        "region graphs",
        "step graph + regional compile",
        "checkpointing + whole compile",
    ],
)
def test_graphs_and_compile_on_hf_layers_train_as_eager(workload, region, knobs):
    knobs = {
        k: {
            kk: [region if r == "REGION" else r for r in vv] if isinstance(vv, list) else vv
            for kk, vv in v.items()
        }
        for k, v in knobs.items()
    }
    eager, tuned = losses(workload), losses(workload, **knobs)
    assert all(torch.isfinite(torch.tensor(tuned)))
    # the same batch each step, no dropout: the same losses to bf16 rounding
    assert tuned == pytest.approx(eager, rel=2e-2), (eager, tuned)
