"""A job folder's files damaged or edited between two runs of a job: a file nested past Python's
stack is unreadable, not a traceback; a checkpoint that cannot be used is skipped with a warning
naming it and why, and the job resumes from the newest usable one."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from autotune.cli import main
from autotune.errors import AutotuneError
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


def _rehash(folder: Path) -> None:
    """The sizes and SHA-256 of ``trainer_state.json`` written again for the files as they are now:
    an edit that its integrity check lets through."""
    path = folder / checkpoint.STATE
    state = json.loads(path.read_text())
    state["files"] = {name: (folder / name).stat().st_size for name in state["files"]}
    state["sha256"] = {name: checkpoint.sha256(folder / name) for name in state["files"]}
    path.write_text(json.dumps(state))


def _rewrite(path: Path, change) -> None:
    """``change`` applied to what ``torch.save`` wrote in ``path`` (its return value replacing it)."""
    value = torch.load(path, weights_only=True)
    torch.save(change(value), path)


def _int_weights(path: Path) -> None:
    weights = {n: t.to(torch.int32) for n, t in load_file(path).items()}
    save_file(weights, path, metadata={"format": "pt"})


def _reshaped_moment(opt: dict) -> dict:
    first = next(iter(opt["state"].values()))
    first["exp_avg"] = torch.zeros(3)
    return opt


def _set_group_key(opt: dict, key: str, value) -> dict:
    opt["param_groups"][0][key] = value
    return opt


DAMAGES = {
    "rng: a list of an empty mapping": (
        checkpoint.RNG,
        lambda p: _rewrite(p, lambda _: [{}]),
        "rank 0: no 'python' random state",
    ),
    "rng: a mapping": (
        checkpoint.RNG,
        lambda p: _rewrite(p, lambda _: {"a": 1}),
        "not a list of every rank's random states (a mapping)",
    ),
    "rng: a 3-byte torch state": (
        checkpoint.RNG,
        lambda p: _rewrite(p, lambda r: [{**r[0], "torch": torch.zeros(3, dtype=torch.uint8)}]),
        "rank 0: its torch random state does not apply (RuntimeError: ",
    ),
    "optimizer: an empty mapping": (
        checkpoint.OPTIMIZER,
        lambda p: _rewrite(p, lambda _: {}),
        "param_groups: missing",
    ),
    "optimizer: its groups twice": (
        checkpoint.OPTIMIZER,
        lambda p: _rewrite(p, lambda o: {**o, "param_groups": o["param_groups"] * 2}),
        "param_groups: 4 groups, the optimizer has 2",
    ),
    "optimizer: a learning rate of text": (
        checkpoint.OPTIMIZER,
        lambda p: _rewrite(p, lambda o: _set_group_key(o, "lr", "abc")),
        "param_groups.0.lr: 'abc' is not a number",
    ),
    "optimizer: a moment of another shape": (
        checkpoint.OPTIMIZER,
        lambda p: _rewrite(p, _reshaped_moment),
        "state.0.exp_avg: a tensor of shape [3], its parameter's is [",
    ),
    "scheduler: a mapping of something else": (
        checkpoint.SCHEDULER,
        lambda p: _rewrite(p, lambda _: {"garbage": 1}),
        "last_epoch: missing",
    ),
    "scheduler: its lambdas a number": (
        checkpoint.SCHEDULER,
        lambda p: _rewrite(p, lambda s: {**s, "lr_lambdas": 5}),
        "lr_lambdas: 5 is not a list of 2 items",
    ),
    "weights: integers of the right shapes": (
        checkpoint.WEIGHTS,
        _int_weights,
        "int32 values, not floating-point weights",
    ),
}


IN_A_PROCESS_OF_ITS_OWN = {"optimizer: a moment of another shape"}
"""Damage that, unchecked, crashed the process (a segmentation fault): run where a crash is the
test's failure, not the suite's end."""


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_checkpoint_whose_files_do_not_fit_is_skipped_and_the_one_before_resumed(
    reference,  # noqa: F811
    tmp_path,
    capsys,
    damage,
):
    """Files that load (their sums written again with them) but are not the state the job saved:
    applied, they raised a traceback in the job, or crashed it (a moment of another shape: a
    segmentation fault in the optimizer's step). Each is checked before anything of it is applied."""
    src, ref = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    name, change, said = DAMAGES[damage]
    folder = out / "checkpoint-6"
    change(folder / name)
    _rehash(folder)
    if damage in IN_A_PROCESS_OF_ITS_OWN:
        done = autotune("train", *STEPS, "--output-dir", out, timeout=300)
        code, err = done.returncode, done.stderr
        res = json.loads(done.stdout.strip().splitlines()[-1]) if code == 0 else {}
    else:  # in this process: a second interpreter would pay torch's import for each case
        code, res, err = train(capsys, out)
    assert code == 0 and "Traceback" not in err, err
    warnings = _warnings(err)
    assert len(warnings) == 1, err
    assert warnings[0].startswith(
        f"autotune: warning: skipping checkpoint {folder}: {folder / name}: "
    ), warnings[0]
    assert said in warnings[0], warnings[0]
    assert res["start_step"] == 5 and res["losses"] == ref["losses"][4:]


def test_a_checkpoint_renamed_to_a_later_step_is_skipped_as_inconsistent(reference, tmp_path):  # noqa: F811
    """checkpoint-6 renamed checkpoint-8, its state's step edited to 8: its schedule and optimizer
    are at step 6, and a resume from it would skip two steps of the schedule unsaid."""
    src, ref = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    folder = out / "checkpoint-8"
    (out / "checkpoint-6").rename(folder)
    state = json.loads((folder / checkpoint.STATE).read_text())
    state["step"] = 8
    (folder / checkpoint.STATE).write_text(json.dumps(state))
    argv = [*STEPS]
    argv[argv.index("--max-steps") + 1] = "8"
    argv[argv.index("--save-steps") + 1] = "100"
    done = autotune("train", *argv, "--output-dir", out, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert _warnings(done.stderr)[0] == (  # then: checkpoint-4 was trained towards 6 steps
        f"autotune: warning: skipping checkpoint {folder}: {folder / checkpoint.SCHEDULER}: "
        f"last_epoch: 6 is not the step of its {checkpoint.STATE} (8)"
    )
    res = json.loads(done.stdout.strip().splitlines()[-1])
    assert res["start_step"] == 5 and len(res["losses"]) == 4


def test_a_data_position_without_room_for_the_steps_to_come_is_skipped(reference, tmp_path):  # noqa: F811
    """data.next_draw edited to 2**63 - 1: the job took it and wrote checkpoints past 64 bits, which
    its next run refused."""
    src, _ = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    path = out / "checkpoint-6" / checkpoint.STATE
    state = json.loads(path.read_text())
    state["data"]["next_draw"] = 2**63 - 1
    path.write_text(json.dumps(state))
    argv = [*STEPS]
    argv[argv.index("--max-steps") + 1] = "8"
    done = autotune("train", *argv, "--output-dir", out, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert _warnings(done.stderr)[0] == (  # then: checkpoint-4 was trained towards 6 steps
        f"autotune: warning: skipping checkpoint {out / 'checkpoint-6'}: {path}: data.next_draw: "
        f"{2**63 - 1} leaves no room below 2**63 for steps 7..8 (2 draws each)"
    )
    assert json.loads(done.stdout.strip().splitlines()[-1])["start_step"] == 5
    assert checkpoint.read_state(out / "checkpoint-8")["data"]["next_draw"] == 16


def test_a_job_whose_draws_would_pass_64_bits_is_refused(tmp_path, capsys):
    """Its data position would outgrow what a checkpoint may record, and the job refuse its own
    checkpoints."""
    out = tmp_path / "job"
    steps = str(2**62)
    argv = ["train", "--preset", "tiny", "--max-steps", steps, "--stop-at", "1"]
    assert main([*argv, "--no-progress", "--output-dir", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"autotune: error: --max-steps {steps}: its steps draw {2**63} samples (2 a step), past "
        f"2**63, the most a data position holds; allowed: at most {2**62 - 1}"
    )
    assert not list(out.glob("checkpoint-*")) and not (out / "metrics.jsonl").exists()


def test_a_folder_whose_checkpoints_are_all_unusable_is_refused_not_trained_over(
    reference,  # noqa: F811
    tmp_path,
    capsys,
):
    """Every checkpoint skipped: the job trained from step 1, writing its checkpoints over theirs."""
    src, _ = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    for step in (2, 4, 6):
        (out / f"checkpoint-{step}" / checkpoint.STATE).write_text("{}")
    before = {str(p): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    argv = [a for a in STEPS if a != "--json"]
    assert main(["train", *argv, "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all("warning: skipping checkpoint" in line for line in err[:3]), err
    assert err[-1] == (
        f"autotune: error: --output-dir {out}: none of its 3 checkpoints can be resumed from (the "
        f"newest: {out / 'checkpoint-6' / checkpoint.STATE} is missing or unreadable (KeyError)); "
        "training from step 1 would write over them: move them out of it to start afresh, or give "
        "another --output-dir"
    )
    assert {str(p): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_configuration_too_large_for_a_checkpoints_state_is_refused_before_training(
    tmp_path,
    capsys,
    monkeypatch,
):
    """A provenance larger than a checkpoint's trainer_state.json may hold: the job wrote states
    it refused when it resumed (each checkpoint skipped, the job trained from step 1 again)."""
    monkeypatch.setattr(checkpoint, "STATE_MAX_BYTES", 256 << 10)
    cfg = tmp_path / "big.yaml"
    cfg.write_text(f"batch_size: 2\nprovenance: {{note: {'x' * (300 << 10)}}}\n")
    out = tmp_path / "job"
    argv = [a for a in STEPS if a != "--json"]
    assert main(["train", "--config", str(cfg), *argv, "--output-dir", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "autotune: error: config: provenance: 300.0 KiB as a checkpoint's trainer_state.json "
        "records it, where the whole configuration may take at most 192.0 KiB: a job could not "
        "resume from its checkpoints; make it smaller"
    )
    assert not out.exists()


def test_a_checkpoint_writer_never_writes_a_state_its_reader_refuses(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "STATE_MAX_BYTES", 4096)
    state = {"step": 3, "data": {"next_draw": 6}, "config": {"provenance": "x" * 5000}}
    snap = checkpoint.Snapshot(3, {"w": torch.zeros(2)}, {}, {}, [], state, "seed: 0\n")
    with pytest.raises(AutotuneError, match=r"trainer_state.json would take 5.\d KiB, more than "):
        checkpoint.write(snap, tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("impls", [("foreach", "fused"), ("foreach", "master", "foreach")])
def test_a_job_resumed_with_another_optimizer_impl_trains_on(tmp_path, capsys, impls):
    """A checkpoint's groups held how its optimizer ran, which the resumed optimizer took: torch's
    fused AdamW took foreach's ``fused: None`` and failed at its first step; torch's foreach AdamW
    took a ``foreach: True`` (kept by master from the foreach checkpoint it resumed) beside master's
    device learning rate, a tensor it refuses without ``capturable``."""
    out = tmp_path / "job"
    for step, impl in enumerate(impls, 1):
        cfg = tmp_path / f"{impl}.yaml"
        cfg.write_text(f"batch_size: 2\noptimizer: {{impl: {impl}}}\n")
        argv = ["--preset", "tiny", "--max-steps", "3", "--stop-at", str(step), "--no-progress"]
        code = main(["train", "--config", str(cfg), *argv, "--json", "--output-dir", str(out)])
        captured = capsys.readouterr()
        assert code == 0, captured.err
    res = json.loads(captured.out.strip().splitlines()[-1])
    assert res["start_step"] == len(impls) and len(res["losses"]) == 1
    assert res["warnings"] == [
        f"{out / f'checkpoint-{len(impls) - 1}'} was trained with optimizer.impl {impls[-2]}; this "
        f"job goes on with {impls[-1]}, which takes its optimizer state over"
    ]
