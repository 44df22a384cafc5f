"""GR00T N1.7's weights in and out: the name map against the upstream key set (spelled out in
``upstream_n17.py`` from upstream's module structure), a checkpoint in the upstream layout read
bit-exact, and ``--init-from`` -> training -> ``autotune export`` -> reading again round-tripping."""

from __future__ import annotations

import json

import pytest
import torch

from autotune.cli import main
from autotune.weights import (
    load_name_map,
    load_upstream,
    read_layout,
    upstream_tensors,
    write_checkpoint,
)
from autotune.workloads import get_workload
from autotune.workloads.gr00t_n17 import get_preset
from tests.weights.upstream_n17 import upstream_shapes

W17 = get_workload("gr00t_n17")
LM_HEAD = "backbone.model.lm_head.weight"


def upstream_checkpoint(folder, preset: str, *, lm_head: bool = True) -> dict[str, torch.Tensor]:
    """Random tensors under every upstream key (the backbone in bf16, as upstream loads it), in shards."""
    p = get_preset(preset)
    g = torch.Generator().manual_seed(7)
    shapes = upstream_shapes(p) | ({LM_HEAD: (p.vocab_size, p.llm_hidden)} if lm_head else {})
    tensors = {}
    for key, shape in shapes.items():
        t = torch.randn(shape, generator=g) * 0.02
        tensors[key] = t.to(torch.bfloat16) if key.startswith("backbone.") else t
    write_checkpoint(tensors, folder, max_shard_bytes=2 * 10**6)
    (folder / "config.json").write_text(json.dumps({"model_type": "Gr00tN1d7"}))
    return tensors


@pytest.mark.parametrize("preset", ["full", "tiny"])
def test_every_parameter_maps_to_the_upstream_key_set_exactly(preset):
    model = W17.build_model(preset, "meta")
    bound = load_name_map("gr00t_n17").bind(model)
    params = dict(model.named_parameters())
    got = {key: tuple(t.to_upstream(torch.empty(params[name].shape, device="meta")).shape)
           for name, (key, t) in bound.to_upstream.items()}  # fmt: skip
    assert got == upstream_shapes(get_preset(preset))


def test_an_upstream_checkpoint_loads_bit_exact_and_writes_back_the_same(tmp_path):
    source = upstream_checkpoint(tmp_path / "up", "tiny")
    assert len({i.path for i in read_layout(tmp_path / "up").values()}) > 1  # several shards
    model = W17.build_model("tiny", "cpu")
    report = load_upstream(model, tmp_path / "up", "gr00t_n17", "tiny")
    assert report.loaded == sum(1 for _ in model.parameters()) and set(report.ignored) == {LM_HEAD}
    back = upstream_tensors(model, "gr00t_n17")
    assert set(back) == set(source) - {LM_HEAD}
    assert all(torch.equal(back[k].to(source[k].dtype), source[k]) for k in back)
    write_checkpoint(back, tmp_path / "out")
    again = W17.build_model("tiny", "cpu")
    load_upstream(again, tmp_path / "out", "gr00t_n17", "tiny")
    assert all(
        torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters(), strict=True)
    )


@pytest.mark.slow
def test_init_from_then_train_then_export_round_trips(tmp_path, capsys):
    source = upstream_checkpoint(tmp_path / "released", "tiny")
    job = tmp_path / "job"
    argv = ["train", "--workload", "gr00t_n17", "--preset", "tiny", "--no-progress", "--json", "--synthetic",
            "--max-steps", "2", "--save-steps", "2", "--output-dir", str(job), "--init-from", str(tmp_path / "released")]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["export", str(job / "checkpoint-2"), "--out", str(tmp_path / "export")]) == 0
    exported = {}
    for info in read_layout(tmp_path / "export").values():
        from safetensors import safe_open

        with safe_open(info.path, framework="pt") as f:
            exported[info.key] = f.get_tensor(info.key)
    assert set(exported) == set(source) - {LM_HEAD}
    frozen = [k for k in exported if k.startswith("backbone.")]
    trained = [k for k in exported if k.startswith("action_head.")]
    assert all(torch.equal(exported[k], source[k]) for k in frozen)  # the released ones, as stored
    assert any(not torch.equal(exported[k], source[k]) for k in trained)  # fine-tuned
    model = W17.build_model("tiny", "cpu")
    load_upstream(model, tmp_path / "export", "gr00t_n17", "tiny")
    again = upstream_tensors(model, "gr00t_n17")
    assert all(torch.equal(again[k].to(exported[k].dtype), exported[k]) for k in exported)
