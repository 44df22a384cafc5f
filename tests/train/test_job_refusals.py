"""A job's checkpoints are trusted only as far as they check: bytes changed in place are caught by
their SHA-256 (the job resumes from the checkpoint before, and says so), a resume past the job's
end and an export of a state without its step are one line each, and nothing is lost."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.train.job import checkpoint
from tests.clirun import autotune, one_line_error
from tests.train.test_job_cpu import STEPS, reference, train  # noqa: F401  (reference: a fixture)

pytestmark = pytest.mark.slow


def _flip_weight_bytes(path: Path) -> None:
    """Change bytes of a tensor's data in place, same size, header intact: the file still loads."""
    raw = bytearray(path.read_bytes())
    header = 8 + int.from_bytes(raw[:8], "little")
    middle = header + (len(raw) - header) // 2
    raw[middle : middle + 64] = bytes(b ^ 0x5A for b in raw[middle : middle + 64])
    path.write_bytes(bytes(raw))


def test_a_checkpoint_whose_bytes_changed_is_skipped_and_the_one_before_resumed(
    reference,  # noqa: F811
    tmp_path,
    capsys,
):
    src, ref = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    weights = out / "checkpoint-6" / checkpoint.WEIGHTS
    size = weights.stat().st_size
    _flip_weight_bytes(weights)
    assert weights.stat().st_size == size
    code, res, err = train(capsys, out)
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1, err
    assert f"{weights}: its bytes changed since it was written" in warnings[0]
    assert code == 0 and res["start_step"] == 5 and res["losses"] == ref["losses"][4:]


def test_every_checkpoint_file_has_its_sha256_in_the_state(reference):  # noqa: F811
    out, _ = reference
    folder = out / "checkpoint-4"
    state = checkpoint.read_state(folder)
    assert set(state["sha256"]) == set(state["files"])
    assert state["sha256"][checkpoint.WEIGHTS] == checkpoint.sha256(folder / checkpoint.WEIGHTS)


@pytest.mark.parametrize(
    "flags, flag, end",
    [(["--max-steps", "3"], "--max-steps", 3), (["--stop-at", "4"], "--stop-at", 4)],
)
def test_resuming_past_the_jobs_end_is_one_line_and_keeps_every_checkpoint(
    reference,  # noqa: F811
    tmp_path,
    capsys,
    flags,
    flag,
    end,
):
    src, _ = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    argv = [a for a in STEPS if a != "--json"]
    argv[argv.index("--max-steps") + 1] = flags[1] if flag == "--max-steps" else "6"
    if flag == "--stop-at":
        argv += flags
    assert main(["train", *argv, "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"autotune: error: {flag} {end}: {out / 'checkpoint-6'} has already trained to step 6; allowed: "
        f"{flag} >= 6 to resume it, or another --output-dir to start afresh"
    )
    assert [s for s, _ in checkpoint.checkpoints(out)] == [2, 4, 6]
    assert (out / "metrics.jsonl").read_text() == (src / "metrics.jsonl").read_text()


@pytest.mark.parametrize("key", ["step", "config"])
def test_exporting_a_state_without_its_step_or_config_is_one_line(
    reference,  # noqa: F811
    tmp_path,
    capsys,
    key,
):
    src, _ = reference
    folder = Path(shutil.copytree(src / "checkpoint-2", tmp_path / "checkpoint-2"))
    state = json.loads((folder / checkpoint.STATE).read_text())
    del state[key]
    (folder / checkpoint.STATE).write_text(json.dumps(state))
    assert main(["export", str(folder), "--out", str(tmp_path / "export")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"autotune: error: {folder / checkpoint.STATE}: {key}: ")
    assert not (tmp_path / "export").exists()


def test_exporting_a_state_whose_configuration_is_refused_names_the_state_and_the_key(
    reference,  # noqa: F811
    tmp_path,
    capsys,
):
    """The configuration a state records is read as strictly as a file, and its error says where
    it is: 'batch_size: 0 is out of range' alone named neither the file nor its config section."""
    src, _ = reference
    folder = Path(shutil.copytree(src / "checkpoint-2", tmp_path / "checkpoint-2"))
    state = json.loads((folder / checkpoint.STATE).read_text())
    state["config"]["batch_size"] = 0
    (folder / checkpoint.STATE).write_text(json.dumps(state))
    assert main(["export", str(folder), "--out", str(tmp_path / "export")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"autotune: error: {folder / checkpoint.STATE}: config.batch_size: 0 is out of range; "
        "allowed: an integer >= 1"
    )
    assert not (tmp_path / "export").exists()


def test_exporting_a_state_of_an_unknown_workload_names_the_workload(reference, tmp_path, capsys):  # noqa: F811
    """Not the first of its model knobs, which only a known workload has."""
    src, _ = reference
    folder = Path(shutil.copytree(src / "checkpoint-2", tmp_path / "checkpoint-2"))
    state = json.loads((folder / checkpoint.STATE).read_text())
    state["config"]["workload"] = "nope"
    (folder / checkpoint.STATE).write_text(json.dumps(state))
    assert main(["export", str(folder), "--out", str(tmp_path / "export")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"autotune: error: {folder / checkpoint.STATE}: config.workload: workload 'nope' is "
        "unknown; known workloads: ["
    ), err
    assert "'gr00t_n16'" in err  # beside any workload other tests of this process registered
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "export").exists()


def test_exporting_a_checkpoint_whose_weight_has_another_shape_is_one_line(
    reference,  # noqa: F811
    tmp_path,
    capsys,
):
    """A trained weight of another shape (its state's sums written again with it) is refused as a
    resume refuses it, not broadcast into the parameter."""
    from safetensors.torch import load_file, save_file

    src, _ = reference
    folder = Path(shutil.copytree(src / "checkpoint-2", tmp_path / "checkpoint-2"))
    weights = load_file(folder / checkpoint.WEIGHTS)
    name = next(n for n, t in sorted(weights.items()) if t.dim() == 2 and t.shape[0] > 1)
    weights[name] = weights[name][:1].clone()
    save_file(weights, folder / checkpoint.WEIGHTS, metadata={"format": "pt"})
    state = json.loads((folder / checkpoint.STATE).read_text())
    state["files"][checkpoint.WEIGHTS] = (folder / checkpoint.WEIGHTS).stat().st_size
    state["sha256"][checkpoint.WEIGHTS] = checkpoint.sha256(folder / checkpoint.WEIGHTS)
    (folder / checkpoint.STATE).write_text(json.dumps(state))
    assert main(["export", str(folder), "--out", str(tmp_path / "export")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"autotune: error: {folder / checkpoint.WEIGHTS}: ")
    assert f"misshapen ['{name}']" in err
    assert not (tmp_path / "export").exists()


@pytest.mark.parametrize("command", ["export", "train"])
def test_writing_into_a_jobs_checkpoint_is_one_line(reference, tmp_path, capsys, command):  # noqa: F811
    """An export --out or a job's --output-dir inside a checkpoint-N of a job went there, and went
    with it when that job's --save-total-limit deleted the checkpoint (or a resume replaced it)."""
    src, _ = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    inside = out / "checkpoint-2" / "hf"
    if command == "export":
        argv = ["export", str(out / "checkpoint-4"), "--out", str(inside)]
    else:
        argv = ["train", *[a for a in STEPS if a != "--json"], "--output-dir", str(inside)]
    assert main(argv) == 2
    flag = "--out" if command == "export" else "--output-dir"
    assert capsys.readouterr().err.strip() == (
        f"autotune: error: {flag} {inside}: inside the checkpoint {out / 'checkpoint-2'} of a job, "
        "which the job deletes when it rotates or rewrites its checkpoints; give a folder outside it"
    )
    assert sorted(p.name for p in (out / "checkpoint-2").iterdir()) == sorted(
        p.name for p in (src / "checkpoint-2").iterdir()
    )


def test_a_metrics_log_that_is_a_pipe_is_one_line_not_a_hang(reference, tmp_path):  # noqa: F811
    """A job folder handed over with a FIFO (or a link to /dev/zero) as metrics.jsonl: the resume
    read it to its end, which never came (SIGTERM only asked the job to save at its next step)."""
    src, _ = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    (out / "metrics.jsonl").unlink()
    os.mkfifo(out / "metrics.jsonl")
    argv = [a for a in STEPS if a != "--json"]
    argv[argv.index("--max-steps") + 1] = "8"
    done = autotune("train", *argv, "--output-dir", out, timeout=120)
    assert one_line_error(done) == (
        f"autotune: error: --output-dir {out}: {out / 'metrics.jsonl'} is a device, pipe or socket, "
        "not a job's log; remove it or give another --output-dir"
    )
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in src.iterdir())


def test_a_metrics_log_linked_to_nothing_is_not_created_through_the_link(reference, tmp_path):  # noqa: F811
    """A dangling link as metrics.jsonl: the job's append created the file it named, outside the
    folder; the job's log is now a file of the folder."""
    src, _ = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    (out / "metrics.jsonl").unlink()
    outside = tmp_path / "outside.txt"
    (out / "metrics.jsonl").symlink_to(outside)
    argv = [a for a in STEPS if a != "--json"]
    argv[argv.index("--max-steps") + 1] = "7"
    done = autotune("train", *argv, "--output-dir", out, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not outside.exists()
    assert not (out / "metrics.jsonl").is_symlink() and (out / "metrics.jsonl").stat().st_size


def _capped() -> None:
    """The test's process may map 6 GiB: a batch that is not refused fails here, not the host."""
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))


def test_a_batch_larger_than_the_hosts_memory_is_refused_before_anything_is_built(tmp_path):
    """batch_size 100000000 (its samples alone: terabytes) grew the loader until memory ran out
    (the measuring run, --steps, takes the same check)."""
    out = ["--max-steps", "2", "--output-dir", str(tmp_path / "job")]
    argv = ["train", "--preset", "tiny", "--batch-size", "100000000", "--no-progress", *out]
    done = subprocess.run(
        [sys.executable, "-m", "autotune", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_capped,
    )
    line = one_line_error(done)
    assert re.fullmatch(
        r"autotune: error: batch_size: 100000000: its samples alone take [\d.]+ TiB of host memory "
        r"\([\d.]+ KiB a sample\), more than the [\d.]+ GiB available here; allowed: at most \d+ "
        r"\(fewer: its steps need memory too\)",
        line,
    ), line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["verify"], ["profile", "--out", "prof"]])
def test_verify_and_profile_refuse_a_batch_larger_than_the_hosts_memory_as_train_does(
    tmp_path, command
):
    """They started their training processes with it, which failed with 'the stock configuration
    failed: MemoryError: the host's memory ran out' (or the OOM killer) after the host's memory was
    taken, and profile left its --out folder behind."""
    argv = ["--preset", "tiny", "--batch-size", "100000000", "--steps", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "autotune", *command, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        preexec_fn=_capped,
    )
    line = one_line_error(done)
    assert line.startswith("autotune: error: batch_size: 100000000: its samples alone take "), line
    assert list(tmp_path.iterdir()) == []


def test_exporting_a_checkpoint_that_names_code_runs_it_only_when_the_command_names_it(
    reference,  # noqa: F811
    tmp_path,
    capsys,
):
    """A checkpoint handed over is data: its workload naming a file of code (which a job trained
    on a workload of the user's own records) is imported only when --workload says so."""
    src, _ = reference
    folder = Path(shutil.copytree(src / "checkpoint-2", tmp_path / "checkpoint-2"))
    (folder / "evil.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    state = json.loads((folder / checkpoint.STATE).read_text())
    state["config"]["workload"] = f"{folder / 'evil.py'}:Workload"
    (folder / checkpoint.STATE).write_text(json.dumps(state))
    assert main(["export", str(folder), "--out", str(tmp_path / "export")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"autotune: error: {folder / checkpoint.STATE}: workload: '{folder / 'evil.py'}:Workload' "
        "names code to import, and a checkpoint never chooses code to run: give --workload "
        f"{folder / 'evil.py'}:Workload to run it"
    )
    assert not (tmp_path / "ran").exists() and not (tmp_path / "export").exists()
    spec = f"{folder / 'evil.py'}:Workload"
    assert main(["export", str(folder), "--out", str(tmp_path / "export"), "--workload", spec]) == 2
    assert (tmp_path / "ran").exists()  # named by the command: imported (and not a workload)
    assert "has no attribute 'Workload'" in capsys.readouterr().err


def test_a_configuration_that_freezes_every_trainable_region_is_one_line(tmp_path):
    """GR00T N1.7's backbone is frozen already: freezing the rest leaves the optimizer nothing."""
    cfg = tmp_path / "frozen.yaml"
    cfg.write_text("workload: gr00t_n17\nmodel: {freeze: [vlln, vl_adapter, dit, projectors]}\n")
    out = tmp_path / "job"
    proc = autotune(
        "train", "--config", cfg, "--preset", "tiny", "--synthetic", "--max-steps", "1",
        "--no-progress", "--output-dir", out,
    )  # fmt: skip
    line = one_line_error(proc)
    assert "model.freeze" in line and "nothing to train" in line and "'dit'" in line, line
    assert not list(out.glob("checkpoint-*"))
