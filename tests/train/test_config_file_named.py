"""A value of a configuration file that is only checked where a session is built (a region the
workload lacks, fp8 on a CPU) is refused on one line that names the file, as a value refused when
the file is read is: in this process (train, a job, ``autotune.prepare``), in the processes a
command starts (profile, verify, train --nproc 2) and before a study starts (run --base)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import autotune
from autotune.cli import main
from autotune.errors import IncompatibleConfigError

REGIONS = "['connector', 'dit', 'llm_frozen', 'llm_trainable', 'projectors', 'vision', 'vlln']"
NOWHERE = f"compile.regions: 'nowhere' is not a region of workload 'gr00t_n16'; allowed: {REGIONS}"
FP8 = "precision: refused: fp8 training needs a CUDA device"


def _config(tmp_path: Path, text: str = "compile: {regions: [nowhere]}\n") -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(
        f"preset: tiny\nbatch_size: 2\ndevice: cpu\ndata: {{source: synthetic}}\n{text}"
    )
    return path


def _line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    "command",
    [["train", "--steps", "1", "--warmup", "0"], ["train", "--max-steps", "1", "--no-progress"]],
    ids=["measure", "job"],
)
def test_a_region_the_workload_lacks_names_the_file(tmp_path, capsys, command):
    path = _config(tmp_path)
    job = ["--output-dir", str(tmp_path / "job")] if "--max-steps" in command else []
    assert main([*command, *job, "--config", str(path)]) == 2
    assert _line(capsys) == f"autotune: error: {path}: {NOWHERE}"
    assert not list((tmp_path / "job").glob("checkpoint-*"))


def test_fp8_on_a_cpu_names_the_file(tmp_path, capsys):
    path = _config(tmp_path, "precision: {regions: {dit: fp8}}\n")
    assert main(["train", "--config", str(path), "--steps", "1"]) == 2
    assert _line(capsys) == f"autotune: error: {path}: {FP8}"


def test_a_file_read_as_another_workload_is_named_so(tmp_path, capsys):
    path = _config(tmp_path, "precision: {regions: {dit: fp8}}\n")
    assert main(["train", "--config", str(path), "--workload", "gr00t_n16", "--steps", "1"]) == 2
    assert _line(capsys) == f"autotune: error: {path} (as --workload gr00t_n16): {FP8}"


def test_an_error_of_a_flag_names_no_file(tmp_path, capsys):
    """Only the configuration's values are named by its file: the flags name themselves."""
    path = _config(tmp_path, "")
    assert main(["train", "--config", str(path), "--steps", "1", "--nproc", "100000"]) == 2
    assert _line(capsys).startswith("autotune: error: --nproc: 100000 processes is more than")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["profile", "--steps", "1", "--warmup", "0", "--out", "{tmp}/prof"], "profiling failed (config)"),
        (["verify", "--steps", "1"], "verify: the candidate configuration failed"),
        (["train", "--steps", "1", "--warmup", "0", "--nproc", "2"], "training failed (config)"),
    ],
    ids=["profile", "verify", "train-nproc-2"],
)  # fmt: skip
def test_a_region_found_lacking_in_a_started_process_names_the_file(
    tmp_path, capsys, command, said
):
    path = _config(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in command]
    assert main([*argv, "--config", str(path)]) == 2
    assert _line(capsys) == f"autotune: error: {said}: {path}: {NOWHERE}"


@pytest.mark.slow
def test_a_region_found_lacking_in_the_ranks_of_a_job_names_the_file(tmp_path, capsys):
    """Each rank says so on a line of its own (and torchrun adds its own lines); the last line is
    the command's."""
    path, out = _config(tmp_path), tmp_path / "job"
    argv = ["train", "--config", str(path), "--max-steps", "1", "--nproc", "2", "--no-progress"]
    assert main([*argv, "--output-dir", str(out)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == f"autotune: error: training failed (config): {path}: {NOWHERE}"


def test_a_base_of_a_study_is_refused_naming_its_file_before_anything_is_written(tmp_path, capsys):
    path, out = _config(tmp_path), tmp_path / "run"
    assert (
        main(["run", "--base", str(path), "--synthetic", "--trials", "1", "--out", str(out)]) == 2
    )
    assert _line(capsys) == f"autotune: error: {path}: {NOWHERE}"
    assert not out.exists()


def test_prepare_names_the_file(tmp_path):
    path = _config(tmp_path, "compile: {regions: [body, nowhere]}\n")
    model = nn.Linear(4, 4)
    with pytest.raises(IncompatibleConfigError) as refused:
        autotune.prepare(
            path,
            model,
            regions={"body": [model]},
            loss_fn=lambda m, batch: m(batch["x"]).sum(),
            sample_batch={"x": torch.zeros(2, 4)},
        )
    assert str(refused.value) == (
        f"{path}: compile.regions: 'nowhere' is not a region of workload 'gr00t_n16'; "
        "allowed: ['body']"
    )
