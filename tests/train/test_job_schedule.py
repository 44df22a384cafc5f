"""A job resumed on a learning-rate schedule other than its checkpoint's (another kind, warm-up,
peak rate or --max-steps) says so on one line, naming each key with both values, and trains on its
configuration's schedule from the first step it trains, at the checkpoint's position in it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from autotune.cli import main
from autotune.train.job import checkpoint

pytestmark = pytest.mark.slow

JOB = ["--max-steps", "4", "--save-steps", "1", "--log-steps", "1", "--no-progress"]
COSINE = "{schedule: cosine, lr: 1.0e-4, warmup_ratio: 0.25}"


def _config(folder: Path, name: str, optimizer: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        f"preset: tiny\nbatch_size: 2\ndevice: cpu\ndata: {{source: synthetic}}\noptimizer: {optimizer}\n"
    )
    return path


def _train(capsys, config: Path, out: Path, *extra: str) -> list[str]:
    """The warnings of ``autotune train`` of ``config`` in ``out``, which must succeed."""
    assert main(["train", "--config", str(config), *JOB, "--output-dir", str(out), *extra]) == 0
    return [line for line in capsys.readouterr().err.splitlines() if "warning" in line]


@pytest.fixture(scope="module")
def started(tmp_path_factory) -> tuple[Path, Path]:
    """(a job stopped at step 2 of 4 on a cosine schedule warming up for 1 step, its config)."""
    folder = tmp_path_factory.mktemp("schedule")
    config = _config(folder, "cosine", COSINE)
    code = main(
        [
            "train",
            "--config",
            str(config),
            *JOB,
            "--stop-at",
            "2",
            "--output-dir",
            str(folder / "job"),
        ]
    )
    assert code == 0
    return folder / "job", config


def _step_3(started, tmp_path, capsys, config: Path) -> tuple[dict[str, torch.Tensor], list[str]]:
    """The trainable weights after step 3 of the job resumed with ``config``, and its warnings."""
    out = Path(shutil.copytree(started[0], tmp_path / config.stem))
    warnings = _train(capsys, config, out, "--stop-at", "3")
    return load_file(out / "checkpoint-3" / checkpoint.WEIGHTS), warnings


def test_a_changed_schedule_is_one_warning_and_the_configurations_rate_trains_the_next_step(
    started, tmp_path, capsys
):
    same, quiet = _step_3(started, tmp_path, capsys, started[1])
    assert quiet == []
    constant = _config(tmp_path, "constant", "{schedule: constant, lr: 1.0e-3, warmup_ratio: 0.25}")
    changed, warnings = _step_3(started, tmp_path, capsys, constant)
    where = tmp_path / "constant" / "checkpoint-2"
    assert warnings == [
        f"autotune: warning: {where} was trained on another learning-rate schedule (optimizer.schedule "
        "'cosine', now 'constant'; optimizer.lr 0.0001, now 0.001); this job's is used from step 3 "
        "on, at the checkpoint's position in it: learning rate 0.001 at step 3, where the "
        "checkpoint's gives 7.5e-05"
    ]
    # step 3 trained at 0.001, not at the 7.5e-05 that the checkpoint's optimizer state held
    assert any(not torch.equal(same[name], changed[name]) for name in same)
    logged = [
        json.loads(line) for line in (where.parent / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["lr"] for r in logged if r.get("step") == 3 and "lr" in r] == [1.0e-3]


def test_a_longer_job_names_its_steps_in_the_same_line(started, tmp_path, capsys):
    out = Path(shutil.copytree(started[0], tmp_path / "job"))
    longer = [a if a != "4" else "8" for a in JOB]
    assert (
        main(
            [
                "train",
                "--config",
                str(started[1]),
                *longer,
                "--stop-at",
                "3",
                "--output-dir",
                str(out),
            ]
        )
        == 0
    )
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(
        f"autotune: warning: {out / 'checkpoint-2'} was trained on another learning-rate schedule "
        "(--max-steps 4, now 8); this job's is used from step 3 on, at the checkpoint's position in "
        "it: learning rate "
    ), warnings[0]


def test_other_betas_eps_or_weight_decay_are_one_warning_and_train_the_next_step(
    started, tmp_path, capsys
):
    same, _ = _step_3(started, tmp_path, capsys, started[1])
    other = (
        "{schedule: cosine, lr: 1.0e-4, warmup_ratio: 0.25, weight_decay: 0.5, betas: [0.8, 0.9]}"
    )
    changed, warnings = _step_3(started, tmp_path, capsys, _config(tmp_path, "decay", other))
    where = tmp_path / "decay" / "checkpoint-2"
    assert warnings == [
        f"autotune: warning: {where} was trained with optimizer.betas [0.9, 0.999], now [0.8, 0.9]; "
        "optimizer.weight_decay 1e-05, now 0.5; this job trains on its own from step 3 on"
    ]
    saved = torch.load(
        tmp_path / "decay" / "checkpoint-3" / checkpoint.OPTIMIZER, weights_only=True
    )
    assert {g["weight_decay"] for g in saved["param_groups"]} == {0.0, 0.5}
    assert {tuple(g["betas"]) for g in saved["param_groups"]} == {(0.8, 0.9)}
    assert any(not torch.equal(changed[k], same[k]) for k in same)
