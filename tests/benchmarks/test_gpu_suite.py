"""The comparison harness: rows from names and files, its table, and one real run on the CPU."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from autotune.benchmarks.suite_configs import SuiteSettings, resolve
from autotune.benchmarks.suite_table import markdown, rows
from autotune.config import TrainConfig, load_config, save_config
from autotune.errors import ConfigError
from autotune.train.trial.record import TrialRecord
from tests.records import measurement

TINY = SuiteSettings(preset="tiny", batch_size=2, source="synthetic", video_backend="pyav")
BEST = Path(__file__).parents[2] / "reports" / "examples" / "full-1gpu-h200" / "best.yaml"
"""The best.yaml of a real H200 study (model, optimizer, graph and compile knobs on)."""


def _best_yaml(folder: Path) -> Path:
    """A file shaped like ``autotune run``'s best.yaml: tuned knobs, full preset, provenance."""
    cfg = TrainConfig(preset="full")
    cfg.ddp.bucket_cap_mb = 50.0
    cfg.data.num_workers = 0
    cfg.provenance = {"tool": "autotune run", "trial": 3, "speedup_vs_stock": 1.5}
    path = folder / "study1" / "best.yaml"
    path.parent.mkdir(parents=True)
    save_config(cfg, path)
    return path


def test_entries_from_names_and_files(tmp_path):
    path = _best_yaml(tmp_path)
    stock, best, again = resolve(["stock", str(path), str(path)], TINY)
    assert (stock.name, stock.source, stock.config.preset) == ("stock", "builtin", "tiny")
    assert (best.name, again.name) == ("study1/best", "study1/best#2")
    assert best.config.preset == "tiny" and best.config.batch_size == 2
    assert best.config.data.source == "synthetic"
    assert best.config.ddp.bucket_cap_mb == 50.0 and best.config.data.num_workers == 0
    assert best.adjusted == {
        "preset": ["full", "tiny"],
        "batch_size": [16, 2],
        "data.source": [None, "synthetic"],
        "data.video_backend": [None, "pyav"],
    }
    assert best.provenance["trial"] == 3 and best.config.provenance is None
    assert load_config(path).preset == "full"  # the file itself is not touched


def test_unknown_entry_names_the_choices():
    with pytest.raises(
        ConfigError,
        match=r"'stok' is neither a configuration name \[.*'stock'.*\] nor a configuration file",
    ):
        resolve(["stok"], TINY)


def _run(
    samples_per_s: float, losses: list[float], useful_flops_per_sample: float | None = None, **extra
) -> dict:
    m = measurement(
        samples_per_s, peak=3 * 2**30, losses=losses, flops_per_sample=1e12, matmul_tflops=1000.0
    )
    m = replace(
        m,
        step_time=replace(m.step_time, p10_ms=90.0, p90_ms=110.0),
        useful_flops_per_sample=useful_flops_per_sample,
    )
    return {"record": TrialRecord(measurement=m).to_dict(), **extra}


def test_table_rows_speedup_mfu_parity_and_errors():
    parity = {"passed": True, "loss_rel_diff": 0.001, "grad_norm_rel_diff": 0.002}
    results = {
        "command": "python -m autotune.benchmarks.gpu_suite",
        "args": {"preset": "full", "batch_size": 16, "nproc": 1},
        "matmul": {"flops": 1e15, "tflops": 1000.0, "dtype": "bf16", "n": 8192, "device": "H200"},
        "runs": {
            "stock": _run(50.0, [1.0]),
            "x/best": _run(150.0, [1.0], parity=parity, useful_flops_per_sample=0.9e12),
            "compile_all": {"record": TrialRecord.failed("compile", "boom").to_dict()},
            "x/best+fp8": {"skipped": "precision: refused"},
        },
        "profiles": {
            "x/best": {
                "overhead": 0.04,
                "profiled_step_ms": 104.0,
                "unprofiled_step_ms": 100.0,
                "buckets": {"compute_serial": 0.9, "other": 0.1},
                "dominant": "compute_serial",
                "top_kernels": [
                    {"name": "FusedAdam", "total_ms": 80.0, "count": 425, "share": 0.2}
                ],
                "profiled_steps": 5,
            }
        },
    }
    stock, best, failed, skipped = rows(results)
    assert stock["speedup_vs_stock"] == 1.0 and best["speedup_vs_stock"] == pytest.approx(3.0)
    assert best["mfu"] == pytest.approx(1e12 * 150 / 1e15)
    assert best["useful_mfu"] == pytest.approx(0.9e12 * 150 / 1e15) and stock["useful_mfu"] is None
    assert skipped == {"name": "x/best+fp8", "skipped": "precision: refused"}
    assert best["parity_passed"] is True and stock["parity_passed"] is None
    assert failed == {"name": "compile_all", "error": "boom", "reason": "compile"}
    text = markdown(results)
    assert (
        "| x/best | 150.0 | 13.3 | 90–110 | 3.0 / 3.0 | 15.0 % / 13.5 % | 3.00 | PASS 0.10 % / 0.20 % |"
        in text
    )
    assert "| x/best+fp8 | skipped: precision: refused |" in text
    assert "  -   16.00 ms    85.0 launches  FusedAdam" in text
    assert "| compile_all | ERROR (compile): boom" in text
    assert "x/best: profiling overhead 4.0 %" in text


@pytest.mark.slow
def test_real_run_of_a_name_and_a_file_on_cpu(tmp_path):
    """The lead's command on the tiny preset: a stock row, a best.yaml row, the profile of the fastest."""
    path = _best_yaml(tmp_path)
    out = tmp_path / "out" / "headline.json"
    cmd = [
        sys.executable,
        "-m",
        "autotune.benchmarks.gpu_suite",
        "--preset",
        "tiny",
        "--batch-size",
        "2",
        "--source",
        "synthetic",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--profile-steps",
        "1",
        "--timeout",
        "240",
        "--configs",
        str(path),
        "stock",
        "--json",
        str(out),
        "--profile-dir",
        str(tmp_path / "prof"),
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, cwd=Path(__file__).parents[2]
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(out.read_text())
    assert list(got["runs"]) == ["stock", "study1/best"]  # stock first, whatever the order given
    speed = {}
    for name, r in got["runs"].items():
        record = TrialRecord.from_dict(r["record"])
        assert record.ok, r.get("log_tail")
        assert record.measurement.steps == 2 and len(record.measurement.losses) == 3
        speed[name] = record.measurement.samples_per_s
    best = got["runs"]["study1/best"]
    assert best["source"] == str(path) and best["provenance"]["trial"] == 3
    assert best["adjusted"]["preset"] == ["full", "tiny"]
    assert best["parity"]["passed"] is True and best["parity"]["steps"] == 3
    assert got["matmul"]["flops"] > 0
    assert got["matmul"]["dtype"] == ("bf16" if torch.cuda.is_available() else "fp32")
    table = {r["name"]: r for r in got["table"]}
    assert table["stock"]["speedup_vs_stock"] == 1.0
    assert table["study1/best"]["speedup_vs_stock"] == pytest.approx(
        speed["study1/best"] / speed["stock"]
    )
    assert 0 < table["study1/best"]["mfu"] < 1
    ((name, prof),) = got["profiles"].items()
    fastest = max(speed, key=speed.get)
    assert name == fastest, prof
    assert isinstance(prof["overhead"], float) and prof["unprofiled_step_ms"] > 0
    assert sum(prof["buckets"].values()) == pytest.approx(1.0)
    assert any(Path(prof["trace_dir"]).glob("rank0.pt.trace.json.gz"))
    md = out.with_suffix(".md").read_text()
    assert "| study1/best |" in md and "| stock |" in md
    assert proc.stdout.rstrip().endswith(md.rstrip().splitlines()[-1])  # the table is printed last


def test_knobs_on_top_of_a_shipped_best_and_rows_fitted_to_a_cpu():
    from autotune.benchmarks.suite_configs import fit_to_machine, reset
    from autotune.config.compat import Machine

    qkv = "+model.fused_frozen_qkv=true+kernels.cublaslt_workspace_kib=1"
    best, more, fp8 = resolve(
        [str(BEST), f"{BEST}{qkv}", f"{BEST}+precision.regions.dit=fp8"], TINY
    )
    assert more.name == f"full-1gpu-h200/best{qkv}" and more.source == best.source
    assert more.config.model.fused_frozen_qkv and more.config.kernels.cublaslt_workspace_kib == 1
    assert (
        more.config.model.attended_kv_only and more.config.optimizer.impl == "master"
    )  # the file's
    assert more.describe()["knobs"] == {
        "model.fused_frozen_qkv": True,
        "kernels.cublaslt_workspace_kib": 1,
    }
    assert not best.config.model.fused_frozen_qkv and "knobs" not in best.describe()
    assert fp8.config.precision.regions == {"dit": "fp8"}
    (graph,) = resolve(["stock+graphs.mode=step"], TINY)  # a built-in row takes knobs too
    assert graph.overrides == {"graphs": {"mode": "step"}} and graph.config.graphs.mode == "step"
    regions = ["vision", "connector", "llm_frozen", "llm_trainable", "vlln", "dit", "projectors"]
    cpu = Machine(cuda=False)
    for entry in (more, fp8):
        reset(entry, ["compile.regions"])
    assert fit_to_machine(more, cpu, regions) is None
    assert more.config.graphs.mode == "none" and more.config.data.device_prefetch == 0
    assert more.adjusted["graphs.mode"] == ["step", "none"]
    assert more.adjusted["compile.regions"] == [["all"], []]
    assert more.config.model.fused_frozen_qkv  # what the row measures is kept
    assert (
        fit_to_machine(fp8, cpu, regions) == "precision: refused: fp8 training needs a CUDA device"
    )
    with pytest.raises(
        ConfigError, match=r"--reset: 'optimizer.speed' is not a key of the training configuration"
    ):
        reset(best, ["optimizer.speed"])


def test_bad_knobs_on_top_name_the_entry_and_what_is_allowed():
    with pytest.raises(ConfigError, match=r"'fast' of 'stock\+fast' is not KEY=VALUE"):
        resolve(["stock+fast"], TINY)
    with pytest.raises(
        ConfigError,
        match=r"best.yaml\+model.fast=true': model.fast: unknown key; allowed: \[.*'gelu_epilogue'",
    ):
        resolve([f"{BEST}+model.fast=true"], TINY)
    with pytest.raises(ConfigError, match=r"optimizer.streams: 'x' has the wrong type"):
        resolve([f"{BEST}+optimizer.streams=x"], TINY)


def test_a_plus_inside_a_value_or_a_path_is_not_a_knob(tmp_path):
    """``optimizer.lr=1.0e+4`` was split at its ``+``: "'4' of '...' is not KEY=VALUE"."""
    (row,) = resolve([f"{BEST}+optimizer.lr=1.0e+4+kernels.cublaslt_workspace_kib=1"], TINY)
    assert row.knobs == {"optimizer.lr": 1.0e4, "kernels.cublaslt_workspace_kib": 1}
    assert row.config.optimizer.lr == 1.0e4 and row.config.kernels.cublaslt_workspace_kib == 1
    assert row.name == "full-1gpu-h200/best+optimizer.lr=1.0e+4+kernels.cublaslt_workspace_kib=1"
    folder = tmp_path / "wd+1"
    folder.mkdir()
    path = Path(shutil.copy(BEST, folder / "best.yaml"))
    (row,) = resolve([f"{path}+optimizer.weight_decay=1.5e+1"], TINY)
    assert row.source == str(path) and row.config.optimizer.weight_decay == 15.0
    assert row.name == "wd+1/best+optimizer.weight_decay=1.5e+1"


def test_n17_rows_stock_compile_all_a_best_file_and_frozen_prefix_knobs_on_top(tmp_path):
    """``--workload gr00t_n17``: every row trains N1.7 (region graphs over its own regions), knobs on top
    of its study's best validate against its regions on an H200, and a file of N1.6 is refused."""
    from autotune.benchmarks.suite_configs import region_names
    from autotune.config.compat import Machine, check_compatible

    n17 = replace(TINY, workload="gr00t_n17")
    cfg = TrainConfig(workload="gr00t_n17", preset="full")
    cfg.compile.regions = ["all"]
    path = tmp_path / "n17" / "best.yaml"
    path.parent.mkdir()
    save_config(cfg, path)
    on_top = "+model.frozen_prefix_no_grad=true+precision.regions.vision=fp8"
    stock, compiled, graphs, best, more = resolve(
        ["stock", "compile_all", "region_graph", str(path), f"{path}{on_top}"], n17
    )
    regions = region_names("gr00t_n17", "tiny")
    assert {e.config.workload for e in (stock, compiled, graphs, best, more)} == {"gr00t_n17"}
    assert graphs.config.graphs.regions == regions and "vl_adapter" in regions
    assert more.config.model.frozen_prefix_no_grad and more.config.precision.regions == {
        "vision": "fp8"
    }
    h200 = Machine(cuda=True, capability=(9, 0))
    for entry in (stock, compiled, graphs, best, more):
        check_compatible(entry.config, h200, regions)
    with pytest.raises(
        ConfigError, match=r"trains workload 'gr00t_n16'; the suite measures 'gr00t_n17'"
    ):
        resolve([str(BEST)], n17)


def _suite(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "autotune.benchmarks.gpu_suite", *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, cwd=Path(__file__).parents[2]
    )


def test_a_row_over_the_memory_budget_fails_as_out_of_memory_with_its_peak(tmp_path):
    """``--memory-budget`` caps every row as a study caps its trials: a tiny model's process holds
    hundreds of MiB, so 64 MiB refuses it; the table's head names the budget."""
    out = tmp_path / "suite.json"
    proc = _suite(
        *("--preset", "tiny", "--batch-size", "2", "--source", "synthetic"),
        *("--steps", "1", "--warmup", "1", "--timeout", "240", "--profile", "none"),
        *("--memory-budget", "64MiB", "--configs", "stock", "--json", str(out)),
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(out.read_text())
    (row,) = got["table"]
    assert row["reason"] == "oom", row
    assert "64 MiB" in row["error"] or "budget" in row["error"], row["error"]
    assert "capped at 0.1 GiB of device memory" in out.with_suffix(".md").read_text()


def test_a_bad_memory_budget_is_one_line_naming_the_flag():
    proc = _suite("--memory-budget", "lots", "--configs", "stock", timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("gpu_suite: error: --memory-budget: 'lots' is not a size"), line


@pytest.mark.parametrize("flag", ["--out", "--json"])
def test_an_output_that_cannot_be_written_is_one_line_before_any_row(tmp_path, flag):
    """--out naming a file was a FileExistsError traceback from the folder's mkdir."""
    (tmp_path / "a").write_text("a file")
    given = tmp_path / "a" if flag == "--out" else tmp_path / "a" / "suite.json"
    proc = _suite(flag, str(given), "--configs", "stock", timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line == (
        f"gpu_suite: error: {flag} {tmp_path / 'a'}: is a file, not a folder; give a folder (it is "
        "created if needed)"
    )
