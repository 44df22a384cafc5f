"""GPU-only: a training job resumed with another ``optimizer.impl`` on the device, in a captured
whole step, eager, and with the state offloaded to the host: torch's loading places each
parameter's ``step`` by the checkpoint's optimizer, which a capturable update of another refuses;
run on the device machine."""

from __future__ import annotations

import json

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

from autotune.cli import main  # noqa: E402


@pytest.mark.parametrize(
    ("impls", "graphs"),
    [
        (("master", "foreach"), "step"),
        (("foreach", "master"), "step"),
        (("foreach", "foreach"), "none->step"),
        (("fused", "foreach"), "none->step"),
        (("fused, offload: true", "foreach"), "none->step"),
        (("foreach", "fused, offload: true"), "step->none"),
    ],
    ids=[
        "master-then-foreach",
        "foreach-then-master",
        "eager-then-captured",
        "fused-then-captured",
        "offloaded-then-captured",
        "captured-then-offloaded",
    ],
)
def test_a_job_resumed_on_the_gpu_with_another_optimizer_trains_on(tmp_path, capsys, impls, graphs):
    out = tmp_path / "job"
    modes = graphs.split("->") if "->" in graphs else [graphs, graphs]
    for step, (impl, mode) in enumerate(zip(impls, modes), 1):
        cfg = tmp_path / f"{step}.yaml"
        cfg.write_text(
            f"batch_size: 2\ndevice: cuda\noptimizer: {{impl: {impl}}}\ngraphs: {{mode: {mode}}}\n"
        )
        argv = ["--preset", "tiny", "--synthetic", "--max-steps", "4", "--stop-at", str(2 * step)]
        code = main(["train", "--config", str(cfg), *argv, "--no-progress", "--json",
                     "--output-dir", str(out)])  # fmt: skip
        captured = capsys.readouterr()
        assert code == 0, captured.err
    res = json.loads(captured.out.strip().splitlines()[-1])
    assert res["start_step"] == 3 and len(res["losses"]) == 2  # steps 3 and 4, from checkpoint-2
    assert all(torch.isfinite(torch.tensor(res["losses"])))
