"""Every number a user gives is range-checked where it is parsed: a flag's value by its argparse
type, a configuration's by its field type. One line naming the flag or key, exit 2, nothing made."""

from __future__ import annotations

import pytest

from autotune.cli import main
from autotune.config import load_config
from autotune.errors import ConfigError
from autotune.search.budget import parse_bytes


def _error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    "argv, line",
    [
        (["train", "--steps", "0"], "--steps: 0 is out of range; allowed: an integer >= 1"),
        (["train", "--batch-size", "-4"], "--batch-size: -4 is out of range; allowed: an integer >= 1"),
        (["train", "--max-steps", "x"], "--max-steps: 'x' is not an integer; allowed: an integer >= 1"),
        (["train", "--warmup", "-1"], "--warmup: -1 is out of range; allowed: an integer >= 0"),
        # a job's schedule spans --max-steps: its checkpoints recorded a total_steps that export refused
        (["train", "--max-steps", str(10**23)],
         f"--max-steps: {10**23} is out of range; allowed: an integer from 1 to {2**63 - 1}"),
        (["verify", "--steps", "0"], "--steps: 0 is out of range; allowed: an integer >= 1"),
        (["run", "--seed", "-1"], "--seed: -1 is out of range; allowed: an integer from 0 to 4294967295"),
        (["run", "--seed", str(2**32)], f"--seed: {2**32} is out of range; allowed: an integer from 0 to 4294967295"),
        (["run", "--timeout-per-trial", "inf"],
         "--timeout-per-trial: 'inf' is out of range; allowed: a finite number > 0 (seconds)"),
        (["export", "ck", "--out", "x", "--max-shard-size", "nan"],
         "--max-shard-size: 'nan' is out of range; allowed: a finite number > 0 (GB)"),
        (["export", "ck", "--out", "x", "--max-shard-size", "0"],
         "--max-shard-size: '0' is out of range; allowed: a finite number > 0 (GB)"),
        (["data", "make", "d", "--episodes", "0"], "--episodes: 0 is out of range; allowed: an integer >= 1"),
        (["data", "make", "d", "--episodes", "2", "--file-mb=-inf"],
         "--file-mb: '-inf' is out of range; allowed: a finite number > 0 (MB)"),
    ],
)  # fmt: skip
def test_a_flag_out_of_range_is_one_line_before_anything_runs(
    tmp_path, capsys, monkeypatch, argv, line
):
    monkeypatch.chdir(tmp_path)
    if argv[0] == "run":
        argv = [*argv, "--out", "run"]
    assert _error(capsys, argv) == f"autotune: error: {line}"
    assert list(tmp_path.iterdir()) == []  # no run folder, no dataset, no export


def test_a_missing_flag_is_one_line_too(capsys):
    assert (
        _error(capsys, ["export", "ck"])
        == "autotune: error: the following arguments are required: --out"
    )


# under one byte truncated to a budget of 0, which every trial then refused as its config error
@pytest.mark.parametrize("text", ["1e400GiB", "1e30TiB", "0GiB", "0.0001KiB", "0.5"])
def test_a_memory_budget_out_of_range_is_refused(text):
    with pytest.raises(
        ConfigError,
        match=rf"--memory-budget: '{text}' is out of range; allowed: a size of at least 1 byte",
    ):
        parse_bytes(text)


def test_a_memory_budget_on_run_is_one_line(tmp_path, capsys):
    err = _error(capsys, ["run", "--memory-budget", "1e400GiB", "--out", str(tmp_path / "run")])
    assert err.startswith("autotune: error: --memory-budget: '1e400GiB' is out of range")
    assert not (tmp_path / "run").exists()


def test_a_memory_budget_under_one_byte_on_run_is_one_line(tmp_path, capsys):
    err = _error(capsys, ["run", "--memory-budget", "0.0001KiB", "--out", str(tmp_path / "run")])
    assert err.startswith("autotune: error: --memory-budget: '0.0001KiB' is out of range")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "text, line",
    [
        ("optimizer:\n  lr: .inf\n", "optimizer.lr: inf is out of range; allowed: a finite number"),
        ("optimizer:\n  eps: .nan\n", "optimizer.eps: nan is out of range; allowed: a finite number"),
        ("optimizer:\n  weight_decay: -.inf\n", "optimizer.weight_decay: -inf is out of range; allowed: a finite number"),
        ("ddp:\n  bucket_cap_mb: .inf\n", "ddp.bucket_cap_mb: inf is out of range; allowed: a finite number"),
        ("seed: 99999999999999999999\n", "seed: 99999999999999999999 is out of range; allowed: a 64-bit integer"),
        ("seed: -1\n", "seed: -1 is out of range; allowed: an integer in [0, 4294967295]"),
        ("seed: 4294967296\n", "seed: 4294967296 is out of range; allowed: an integer in [0, 4294967295]"),
        # the loader's buffer is drained before a window is measured: 2 workers x 1000000 were 2000001
        # warm-up steps, a run that never measured
        ("data:\n  prefetch_factor: 1000000\n",
         "data.prefetch_factor: 1000000 is out of range; allowed: null or an integer in [1, 64]"),
        # eager steps before a graph's capture, each a step of the run's warm-up
        ("graphs:\n  warmup_steps: 1000000000\n",
         "graphs.warmup_steps: 1000000000 is out of range; allowed: an integer in [1, 1000]"),
        # the dataset made for a configuration without one: it named data make's --episodes
        ("data:\n  episodes: 2000000\n",
         "data.episodes: 2000000 is out of range; allowed: null or an integer in [1, 1000000]"),
    ],
)  # fmt: skip
def test_a_config_number_out_of_range_names_the_key(tmp_path, capsys, text, line):
    path = tmp_path / "c.yaml"
    path.write_text(f"workload: gr00t_n16\npreset: tiny\n{text}")
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert str(exc.value) == f"{path}: {line}"
    assert _error(capsys, ["train", "--config", str(path)]) == f"autotune: error: {path}: {line}"


def test_the_largest_seed_is_accepted(tmp_path):
    (tmp_path / "c.yaml").write_text("workload: gr00t_n16\npreset: tiny\nseed: 4294967295\n")
    assert load_config(tmp_path / "c.yaml").seed == 2**32 - 1


@pytest.mark.parametrize(
    "reference, line",
    [
        ("compile.regions=[all", "--reference: 'compile.regions=[all': the value is not YAML (expected ',' or ']', "
         "but got '<stream end>'); e.g. compile.regions=[all]"),
        ("nosuch.key=1", "--reference: 'nosuch.key': not a knob of the training configuration; allowed at this "
         "level: "),
        ("optimizer.lr=.inf", "--reference 'optimizer.lr=.inf': optimizer.lr: inf is out of range; allowed: a "
         "finite number"),
    ],
)  # fmt: skip
def test_a_bad_reference_is_one_line_before_the_run_folder(tmp_path, capsys, reference, line):
    argv = ["run", "--synthetic", "--reference", reference, "--out", str(tmp_path / "run")]
    assert _error(capsys, argv).startswith(f"autotune: error: {line}")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["verify"],
        ["profile", "--out", "prof"],
        ["train", "--max-steps", "1", "--output-dir", "job"],
        ["run", "--trials", "1", "--out", "run"],
    ],
)
def test_more_processes_than_the_machine_has_is_refused_before_one_starts(
    tmp_path, capsys, monkeypatch, command
):
    """torchrun was started with --nproc_per_node as given: 10**9 processes on a CPU machine (a
    run's trial, a job, a verify or profile window)."""
    import autotune.train.trial.launch as launch_module
    from autotune.config.compat import usable_cpus

    def launch(*args, **kwargs):
        raise AssertionError("a training process was launched")

    monkeypatch.setattr(launch_module, "launch", launch)
    monkeypatch.setattr("autotune.train.window.verify.launch", launch)
    monkeypatch.chdir(tmp_path)
    cores = usable_cpus()
    line = _error(capsys, [*command, "--preset", "tiny", "--synthetic", "--nproc", "1000000000"])
    assert line == (
        f"autotune: error: --nproc: 1000000000 processes is more than this machine's {cores} CPU "
        f"cores (at most 4 processes a core) take; allowed: 1 to {4 * cores}"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["data", "make", "", "--episodes", "1", "--force"], "DIR"),
        (["data", "check", ""], "DIR"),
        (["data", "modality", "", "--write"], "DIR"),
        (["classify", ""], "PATH"),
        (["report", ""], "RUN_DIR"),
    ],
)
def test_an_empty_path_is_refused_not_read_as_the_current_folder(
    tmp_path, capsys, monkeypatch, argv, name
):
    """``data make "$UNSET" --force`` named the current folder; ``data check ""`` said
    'meta/info.json: missing'."""
    monkeypatch.chdir(tmp_path)
    assert (
        _error(capsys, argv) == f"autotune: error: {name}: '' is not a path; give a file or folder"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_most_episodes_a_configuration_asks_for_is_what_data_make_makes():
    from autotune.config.knob import walk
    from autotune.config.training import TrainConfig
    from autotune.data.make import MAX_EPISODES

    spec = next(d.spec for d in walk(TrainConfig) if d.key == "data.episodes")
    assert spec.high == MAX_EPISODES
