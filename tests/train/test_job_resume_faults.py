"""A job folder's files damaged or edited between two runs of a job: a file nested past Python's
stack is unreadable, not a traceback; a checkpoint that cannot be used is skipped with a warning
naming it and why, and the job resumes from the newest usable one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from autotune.train.job import checkpoint
from tests.clirun import autotune, one_line_error
from tests.tmpfs import fill, small_disk
from tests.train.test_job_cpu import STEPS, reference, train  # noqa: F401  (reference: a fixture)

pytestmark = pytest.mark.slow
DEEP = "[" * 50000 + "]" * 50000
"""JSON nested deeper than Python's stack: ``json.loads`` raises RecursionError."""


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if "warning" in line]


def test_a_state_nested_past_the_stack_is_skipped_as_unreadable(reference, tmp_path, capsys):  # noqa: F811
    src, ref = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    (out / "checkpoint-6" / checkpoint.STATE).write_text(DEEP)
    code, res, err = train(capsys, out)
    assert code == 0 and "Traceback" not in err, err
    assert _warnings(err) == [
        f"autotune: warning: skipping checkpoint {out / 'checkpoint-6'}: "
        f"{out / 'checkpoint-6' / checkpoint.STATE} is missing or unreadable (RecursionError)"
    ]
    assert res["start_step"] == 5 and res["losses"] == ref["losses"][4:]


@pytest.mark.parametrize("where", ["first", "last"])
def test_a_metrics_line_nested_past_the_stack_is_dropped_when_the_job_resumes(
    reference,  # noqa: F811
    tmp_path,
    capsys,
    where,
):
    """The first line is read to tell a job's folder from another program's, every line when the
    resumed job rewrites the log to its checkpoint."""
    src, _ = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    metrics = out / "metrics.jsonl"
    before = metrics.read_text()
    lines = before.splitlines()
    lines = [DEEP, *lines] if where == "first" else [*lines, DEEP]
    metrics.write_text("".join(line + "\n" for line in lines))
    code, res, err = train(capsys, out)
    assert code == 0 and "Traceback" not in err and not _warnings(err), err
    assert res["start_step"] == 7 and not res["losses"]
    assert metrics.read_text() == before


def test_a_full_disk_while_the_resume_rewrites_the_metrics_is_one_line_and_keeps_them(
    reference,  # noqa: F811
    tmp_path,
):
    """The resumed job rewrites metrics.jsonl to its checkpoint through a temporary file, which the
    full disk cuts: the line names the log and the space left, the log stays as it was and the
    temporary file goes."""
    src, _ = reference
    with small_disk(tmp_path / "disk", "24m") as disk:
        out = disk / "job"
        out.mkdir()
        shutil.copytree(src / "checkpoint-6", out / "checkpoint-6")
        shutil.copy(src / "metrics.jsonl", out / "metrics.jsonl")
        filler = fill(disk)
        # one page free: the job's lock takes it, and the rewrite of the log finds none
        os.truncate(filler, filler.stat().st_size - 4096)
        argv = [a for a in STEPS if a != "--json"]
        done = autotune("train", *argv, "--output-dir", out, timeout=300)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip().splitlines()[-1] == (
            f"autotune: error: {out / 'metrics.jsonl'}: writing the metrics failed (No space left "
            "on device), 0 MiB free there; the checkpoints written before are intact"
        )
        assert (out / "metrics.jsonl").read_bytes() == (src / "metrics.jsonl").read_bytes()
        assert sorted(p.name for p in out.iterdir()) == ["checkpoint-6", "metrics.jsonl"]


@pytest.mark.parametrize("name", ["checkpoint-6", "tensorboard"])
def test_a_link_under_a_name_the_job_writes_is_refused_before_training(
    reference,  # noqa: F811
    tmp_path,
    name,
):
    """A checkpoint's name linked elsewhere was found only when the job reached that step and could
    not replace it (after training to it); TensorBoard's files were written through a link into the
    folder it led to."""
    src, _ = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    shutil.rmtree(out / name)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "notes.txt").write_text("mine\n")
    (out / name).symlink_to(elsewhere)
    before = sorted(p.name for p in out.iterdir())
    argv = [a for a in STEPS if a != "--json"]
    line = one_line_error(autotune("train", *argv, "--output-dir", out, timeout=300))
    assert line == (
        f"autotune: error: --output-dir {out}: {out / name} is a symbolic link (to {elsewhere}), "
        "which the job would write through or fail to replace; remove it, or give another "
        "--output-dir"
    )
    assert sorted(p.name for p in out.iterdir()) == before
    assert (out / "metrics.jsonl").read_bytes() == (src / "metrics.jsonl").read_bytes()
    assert [p.name for p in elsewhere.iterdir()] == ["notes.txt"]


def test_a_checkpoint_write_that_cannot_replace_its_folder_removes_its_temporary_folder(tmp_path):
    """The folder of the step (here a link) cannot be replaced: the complete temporary folder went
    with the failure no more than a partial one does."""
    import torch

    from autotune.errors import AutotuneError

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "job"
    out.mkdir()
    (out / "checkpoint-3").symlink_to(elsewhere)
    snap = checkpoint.Snapshot(3, {"w": torch.zeros(2)}, {}, {}, [], {"step": 3}, "seed: 0\n")
    with pytest.raises(AutotuneError, match=r"writing .*checkpoint-3 failed \(OSError: "):
        checkpoint.write(snap, out)
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-3"]
    assert list(elsewhere.iterdir()) == []
