"""The job's weights in and out (``--init-from`` of an upstream checkpoint, ``autotune export``)
and its throughput watch, on the CPU with the tiny preset."""

from __future__ import annotations

import json
import os
import stat
import time
import types
from pathlib import Path

import pytest
import torch
import yaml
from safetensors import safe_open

from autotune.cli import main
from autotune.config import config_from_dict
from autotune.train import knobs, precision
from autotune.train.job.training import JobOptions, run_job
from autotune.train.job.watch import MetricsLog, ThroughputWatch, likely_cause
from autotune.weights import load_name_map, load_upstream, read_layout, upstream_tensors
from autotune.workloads import get_workload
from autotune.workloads.gr00t_n16 import get_preset
from tests.weights.upstream import write_upstream

pytestmark = pytest.mark.slow
JOB = ["train", "--preset", "tiny", "--no-progress", "--json", "--log-steps", "1"]


def tensors_of(folder) -> dict[str, torch.Tensor]:
    out = {}
    for info in read_layout(folder).values():
        with safe_open(info.path, framework="pt") as f:
            out[info.key] = f.get_tensor(info.key)
    return out


def test_init_from_then_export_then_init_from_round_trips_bit_exact(tmp_path, capsys):
    source = write_upstream(
        tmp_path / "released",
        get_preset("tiny"),
        extra={"backbone.model.language_model.lm_head.weight": (1024, 64)},
    )
    # an upstream Trainer's checkpoint-N holds its training's state beside the model
    trainer_state = ["optimizer.pt", "scheduler.pt", "rng_state_0.pth", "trainer_state.json"]
    for name in trainer_state:
        (tmp_path / "released" / name).write_bytes(b"{}")
    job = tmp_path / "job"
    assert (
        main(
            [
                *JOB,
                "--synthetic",
                "--max-steps",
                "2",
                "--save-steps",
                "2",
                "--output-dir",
                str(job),
                "--init-from",
                str(tmp_path / "released"),
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["init_from"] == str(
        tmp_path / "released"
    )
    # the job's checkpoint is as readable as its other files (safetensors writes 0600 of itself)
    modes = {f.name: stat.S_IMODE(f.stat().st_mode) for f in (job / "checkpoint-2").iterdir()}
    assert modes["model.safetensors"] == modes["config.yaml"], modes
    assert main(["export", str(job / "checkpoint-2"), "--out", str(tmp_path / "export")]) == 0
    exported = tensors_of(tmp_path / "export")
    assert (
        tmp_path / "export" / "config.json"
    ).is_file()  # the released folder's other files come along
    assert not [n for n in trainer_state if (tmp_path / "export" / n).exists()]
    assert set(exported) == set(source) - {
        "backbone.model.language_model.lm_head.weight"
    }  # tied: not written
    cfg = config_from_dict(yaml.safe_load((job / "checkpoint-2" / "config.yaml").read_text()))
    model = get_workload("gr00t_n16").build_model("tiny", "cpu")
    regions = get_workload("gr00t_n16").regions(model)
    knobs.apply_trainability(regions, cfg)
    precision.set_param_dtypes(regions, cfg.precision)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    bound = load_name_map("gr00t_n16").bind(model)
    for name, (key, _) in bound.to_upstream.items():
        if name in trained:  # the fine-tuned weights moved; in fp32 as trained
            assert exported[key].dtype == torch.float32 and not torch.equal(
                exported[key], source[key]
            )
        else:  # the frozen ones are the released ones, in the dtype they were stored in
            assert exported[key].dtype == source[key].dtype and torch.equal(
                exported[key], source[key]
            )
    load_upstream(model, tmp_path / "export", "gr00t_n16", "tiny")
    again = upstream_tensors(model, "gr00t_n16")
    assert all(
        again[k].dtype == exported[k].dtype and torch.equal(again[k], exported[k]) for k in exported
    )


def _released_with_strays(folder: Path, outside: Path) -> tuple[set[str], set[str]]:
    """An upstream checkpoint in ``folder`` with what a user's folder holds besides: (the files an
    export copies, the names it leaves out)."""
    write_upstream(folder, get_preset("tiny"))
    copied = {"processor_config.json", "statistics.json", "embodiment_id.json", "README.md"}
    for name in copied:
        (folder / name).write_text("{}")
    (folder / ".env").write_text("HF_TOKEN=hf_secret_value\n")
    for name in ("consolidated.safetensors", "adapter_model.safetensors", "optimizer.pt"):
        (folder / name).write_bytes(b"{}")
    outside.write_text("a private key\n")
    (folder / "tokenizer.json").symlink_to(outside)  # a link leading out of the folder
    (folder / "tokenizer_config.v2.json").write_text('{"v": 2}')
    (folder / "tokenizer_config.json").symlink_to("tokenizer_config.v2.json")  # one inside it
    os.mkfifo(folder / "generation_config.json")  # never opened: a copy would wait on it for ever
    (folder / "experiment_cfg").mkdir()
    left = {".env", "consolidated.safetensors", "adapter_model.safetensors", "optimizer.pt",
            "tokenizer.json", "tokenizer_config.v2.json", "generation_config.json", "experiment_cfg"}  # fmt: skip
    return {*copied, "config.json", "tokenizer_config.json"}, left


def test_an_export_copies_only_the_files_an_upstream_checkpoint_holds_beside_its_weights(
    tmp_path, capsys
):
    """A ``.env`` beside the weights, a stray weight file, a link to a file elsewhere stay where
    they are; one line says what was left out."""
    released = tmp_path / "released"
    copied, left = _released_with_strays(released, tmp_path / "outside.txt")
    job = tmp_path / "job"
    argv = [*JOB, "--synthetic", "--max-steps", "1", "--output-dir", str(job),
            "--init-from", str(released)]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["export", str(job / "checkpoint-1"), "--out", str(tmp_path / "export")]) == 0
    files = {p.name for p in (tmp_path / "export").iterdir()}
    weights = {p.name for p in (tmp_path / "export").glob("model*")}
    assert files - weights == copied
    assert (tmp_path / "export" / "tokenizer_config.json").read_text() == '{"v": 2}'
    assert not any((tmp_path / "export" / n).is_symlink() for n in files)
    note = capsys.readouterr().err.strip()
    assert len(note.splitlines()) == 1 and note.startswith("autotune: note: "), note
    assert f"{released} (--init-from): {len(left)} files left out of the export (" in note
    assert all(repr(name) in note for name in left), note


def _as_hub_cache(released: Path, cache: Path) -> Path:
    """``released`` laid out as the Hugging Face cache keeps a download: its files as blobs of the
    repository, the snapshot's files links to them; the snapshot folder."""
    repo = cache / "models--nvidia--GR00T-N1.6-3B"
    snapshot = repo / "snapshots" / "0123abc"
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for i, f in enumerate(sorted(released.iterdir())):
        blob = repo / "blobs" / f"{i:040x}"
        f.rename(blob)
        (snapshot / f.name).symlink_to(Path("../../blobs") / blob.name)
    return snapshot


def test_an_export_of_a_job_started_from_the_hub_cache_copies_its_files(tmp_path, capsys):
    """A snapshot of the Hugging Face cache holds only links to its repository's blobs: the files
    an upstream checkpoint holds beside its weights are copied from there too."""
    released = tmp_path / "released"
    write_upstream(released, get_preset("tiny"))
    (released / "processor_config.json").write_text('{"p": 1}')
    snapshot = _as_hub_cache(released, tmp_path / "hub")
    job = tmp_path / "job"
    argv = [*JOB, "--synthetic", "--max-steps", "1", "--output-dir", str(job),
            "--init-from", str(snapshot)]  # fmt: skip
    assert main(argv) == 0
    assert main(["export", str(job / "checkpoint-1"), "--out", str(tmp_path / "export")]) == 0
    export = tmp_path / "export"
    assert (export / "processor_config.json").read_text() == '{"p": 1}'
    assert (export / "config.json").is_file() and not (export / "config.json").is_symlink()
    assert "left out" not in capsys.readouterr().err


def test_init_from_a_checkpoint_missing_a_key_fails_on_one_line(tmp_path, capsys):
    gone = "backbone.model.language_model.model.layers.3.self_attn.k_norm.weight"
    write_upstream(tmp_path / "released", get_preset("tiny"), drop=(gone,))
    code = main(
        [
            *JOB,
            "--synthetic",
            "--max-steps",
            "1",
            "--output-dir",
            str(tmp_path / "job"),
            "--init-from",
            str(tmp_path / "released"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and gone in err[0] and "missing" in err[0]


def test_a_slow_job_is_told_so_with_the_cause_from_a_profile(tmp_path, capsys):
    cfg = config_from_dict(
        {
            "preset": "tiny",
            "batch_size": 2,
            "device": "cpu",
            "data": {"source": "synthetic"},
            "provenance": {"samples_per_s": 1e6, "world_size": 1},
        }
    )
    out = tmp_path / "job"
    # synthetic data: rates count from step 2; the profile window is 1 + 1 + 1 + 1 steps
    res = run_job(
        cfg, JobOptions(max_steps=6, output_dir=out, log_steps=1, progress=False, profile_steps=1)
    ).to_dict()
    assert "below the 1000000.0 that best.yaml's provenance measured" in capsys.readouterr().err
    assert (
        res["profile"]["dominant"] in res["profile"]["buckets"]
        and "likely cause" in res["profile"]["cause"]
    )
    summary = json.loads(
        (tmp_path / res["profile"]["folder"] / "classification.summary").read_text()
    )
    assert summary["classification"]["steps"] == 1
    assert len(res["losses"]) == 6  # the profiled steps are training steps
    events = [
        json.loads(line).get("event") for line in (out / "metrics.jsonl").read_text().splitlines()
    ]
    assert "throughput_warning" in events and "profile" in events


def test_the_watch_compares_per_gpu_rates_and_warns_once():
    watch = ThroughputWatch({"samples_per_s": 200.0, "world_size": 2}, world_size=4)
    assert watch.expected == 400.0
    assert watch.observe(10, 370.0) is None  # within 10 %
    assert "below" in watch.observe(20, 350.0) and watch.profile_wanted
    assert watch.observe(30, 100.0) is None
    assert ThroughputWatch(None, 1).observe(1, 1.0) is None
    line = likely_cause(
        {"dominant": "data_stall", "buckets": {"data_stall": 0.6, "compute_serial": 0.4}}
    )
    assert line.startswith("likely cause: data_stall (60 % of the step): the data loader")


@pytest.mark.parametrize("device, named", [("cpu", "the CPU"), ("cuda", "the GPU")])
def test_the_likely_cause_names_the_device_the_job_ran_on(device, named):
    for bucket in ("compute_serial", "launch_overhead"):
        line = likely_cause({"dominant": bucket, "buckets": {bucket: 0.9, "other": 0.1}}, device)
        assert named in line and "the GPU the CPU" not in line
        assert ("the GPU" in line) == (device == "cuda")


@pytest.mark.parametrize("start", [0, 2])
def test_a_restarted_job_drops_what_it_logged_past_its_start(tmp_path, monkeypatch, start):
    """Resumed from checkpoint ``start`` (0: a job killed before its first checkpoint, started again
    from nothing): the steps logged after it leave metrics.jsonl and TensorBoard purges them."""
    from tensorboard.summary.writer import event_file_writer

    # the first run's event file is named a minute earlier, as a run before a restart is: within one
    # second of one process TensorBoard orders the two files by a counter compared as text (".10"
    # before ".9"), and the old run's file, read last, would not be purged
    earlier = time.time() - 60
    monkeypatch.setattr(event_file_writer, "time", types.SimpleNamespace(time=lambda: earlier))
    first = MetricsLog(tmp_path, 0)
    monkeypatch.undo()
    for step in (1, 2, 3):
        first.scalars(step, {"loss": float(step)})
    first.close()
    again = MetricsLog(tmp_path, start)
    again.scalars(start + 1, {"loss": 9.0})
    again.close()
    want = [*((s, float(s)) for s in range(1, start + 1)), (start + 1, 9.0)]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"]) for r in rows] == want
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()  # as TensorBoard reads the folder: the purge event hides the old run's later steps
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == want


def test_init_from_refreshes_the_fused_copies_of_the_frozen_projections_in_place(
    tmp_path, monkeypatch
):
    """model.fused_frozen_qkv keeps a copy of the frozen q/k/v weights, made when the session is built:
    weights loaded after that (--init-from) must reach it, at the same address (a captured graph reads
    it there). The tiny model's loss barely moves with its vision q/k/v, so the copy itself is compared."""
    from autotune.train.session import Session

    write_upstream(tmp_path / "released", get_preset("tiny"))
    cfg = config_from_dict(
        {
            "preset": "tiny",
            "batch_size": 2,
            "device": "cpu",
            "data": {"source": "synthetic"},
            "model": {"fused_frozen_qkv": True},
        }
    )
    s = Session(cfg)
    attn = s.model.vision.blocks[0].self_attn
    address = attn.qkv.weight.data_ptr()
    load_upstream(s.model, tmp_path / "released", "gr00t_n16", "tiny")
    assert not torch.equal(
        attn.qkv.weight, torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
    )
    s.weights_loaded()
    assert torch.equal(
        attn.qkv.weight, torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
    )
    assert torch.equal(
        attn.qkv.bias, torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias])
    )
    assert attn.qkv.weight.data_ptr() == address
    s.close()
    # and the job does it after --init-from (the real method, watched)
    calls = []
    real = Session.weights_loaded
    monkeypatch.setattr(Session, "weights_loaded", lambda self: (calls.append(1), real(self))[1])
    config = tmp_path / "fused.yaml"
    config.write_text(yaml.safe_dump({"preset": "tiny", "model": {"fused_frozen_qkv": True}}))
    assert (
        main(
            [
                *JOB,
                "--synthetic",
                "--max-steps",
                "1",
                "--output-dir",
                str(tmp_path / "job"),
                "--init-from",
                str(tmp_path / "released"),
                "--config",
                str(config),
            ]
        )
        == 0
    )
    assert calls == [1]
