"""Faults and hand edits around a job's files: a checkpoint or an export that cannot be written
(a size-capped tmpfs fills) leaves nothing half-written and says so on one line; a
``trainer_state.json`` edited by hand is skipped as corrupt, not a traceback; a resume that would
train beside other frozen weights, or an empty ``--output-dir``, is refused."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotune.cli import main
from autotune.train.job import checkpoint
from autotune.train.job.watch import MetricsLog
from autotune.weights import INDEX, read_layout
from autotune.weights.unfinished import MARKER
from tests.clirun import ROOT, autotune, one_line_error
from tests.tmpfs import fill, small_disk
from tests.train.test_job_cpu import (  # noqa: F401  (reference: a fixture)
    STEPS,
    logged_steps,
    reference,
    train,
    wait_for,
)

pytestmark = pytest.mark.slow


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autotune", *argv], capture_output=True, text=True, timeout=300
    )


def test_a_checkpoint_that_cannot_be_written_leaves_no_partial_folder(tmp_path):
    argv = [a for a in STEPS if a != "--json"]
    with small_disk(tmp_path / "disk", "12m") as disk:
        out = disk / "job"
        done = _run("train", *argv, "--output-dir", str(out))
        err = done.stderr.strip().splitlines()
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert not list(out.glob(".checkpoint-*")), "the partial checkpoint is left on the disk"
        assert err[-1].startswith(f"autotune: error: writing {out / 'checkpoint-2'} failed (")
        assert err[-1].endswith(
            ", 0 MiB free there when it failed; the checkpoints before it are intact"
        )


def test_an_export_that_cannot_be_written_is_one_line_and_leaves_nothing(reference, tmp_path):  # noqa: F811
    src, _ = reference
    with small_disk(tmp_path / "disk", "4m") as disk:
        export = disk / "export"
        done = _run("export", str(src / "checkpoint-6"), "--out", str(export))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        err = done.stderr.strip()
        assert len(err.splitlines()) == 1 and err.endswith("); nothing was written there"), err
        assert err.startswith(f"autotune: error: {export}: writing the checkpoint failed (")
        assert list(disk.iterdir()) == []


def test_an_export_into_an_empty_mount_point_is_written_on_its_disk(reference, tmp_path):  # noqa: F811
    """``--out /mnt/x``: a checkpoint staged beside it could not be moved in (another disk)."""
    src, _ = reference
    with small_disk(tmp_path / "disk", "64m") as disk:
        done = _run("export", str(src / "checkpoint-6"), "--out", str(disk))
        assert done.returncode == 0, done.stderr
        assert (disk / "model.safetensors.index.json").is_file()
        assert not [p for p in disk.iterdir() if p.name.startswith(".")]
    assert [p.name for p in tmp_path.iterdir()] == ["disk"]


def test_an_export_killed_among_its_moves_is_refused_as_init_from_and_redone_by_rerunning_it(
    reference,  # noqa: F811
    tmp_path,
    capsys,
):
    """Killed as it moved the index in, an export leaves its shards and config.json without an index:
    a job refuses the folder as its --init-from, and the same export again replaces them."""
    src, _ = reference
    export = tmp_path / "export"
    argv = ["export", str(src / "checkpoint-6"), "--out", str(export)]
    killed = subprocess.run([sys.executable, "-m", "tests.crashat", "SIGKILL", "os.rename", INDEX,
                             *argv], cwd=ROOT, timeout=300)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL and not (export / INDEX).exists()
    job = [*[a for a in STEPS if a != "--json"], "--output-dir", str(tmp_path / "job")]
    assert main(["train", *job, "--init-from", str(export)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"autotune: error: {export}: an export into it did not finish ({MARKER} is there): its "
        f"files are not a whole checkpoint; run that export again (autotune export "
        f"D/checkpoint-N --out {export}), or give another folder"
    )
    assert main(argv) == 0
    assert MARKER not in {p.name for p in export.iterdir()}
    assert read_layout(export)


def _edit(state: dict, key: str) -> None:
    if key == "data":
        del state["data"]
    elif key == "data.next_draw":
        state["data"]["next_draw"] = -5
    elif key == "data.next_draw past 64 bits":  # a traceback from islice, or a skip without end
        state["data"]["next_draw"] = 10**30
    elif key == "init_from":
        state["init_from"] = "somewhere"
    elif key == "sha256":
        state["sha256"]["/dev/zero"] = "0" * 64
    elif key == "files":  # a file outside the folder, of the size it has, to be hashed
        outside = checkpoint.__file__
        state["files"][outside] = Path(outside).stat().st_size
        state["sha256"][outside] = "0" * 64
    else:  # the folder is checkpoint-6
        state["step"] = 4


@pytest.mark.parametrize(
    "key",
    [
        "data",
        "data.next_draw",
        "data.next_draw past 64 bits",
        "init_from",
        "sha256",
        "files",
        "step",
    ],
)
def test_a_state_edited_by_hand_is_skipped_and_the_checkpoint_before_resumed(
    reference,  # noqa: F811
    tmp_path,
    capsys,
    key,
):
    src, ref = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    path = out / "checkpoint-6" / checkpoint.STATE
    state = json.loads(path.read_text())
    _edit(state, key)
    path.write_text(json.dumps(state))
    code, res, err = train(capsys, out)
    warnings = [line for line in err.splitlines() if "warning" in line]
    named = "data.next_draw" if key.startswith("data") else key
    assert len(warnings) == 1 and f"{path}: {named}: " in warnings[0], err
    assert code == 0 and res["start_step"] == 5 and res["losses"] == ref["losses"][4:]


def test_exporting_a_state_with_an_edited_init_from_is_one_line(reference, tmp_path, capsys):  # noqa: F811
    src, _ = reference
    folder = Path(shutil.copytree(src / "checkpoint-2", tmp_path / "checkpoint-2"))
    state = json.loads((folder / checkpoint.STATE).read_text())
    state["init_from"] = "somewhere"
    (folder / checkpoint.STATE).write_text(json.dumps(state))
    assert main(["export", str(folder), "--out", str(tmp_path / "export")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"autotune: error: {folder / checkpoint.STATE}: init_from: ")
    assert not (tmp_path / "export").exists()


def test_resuming_with_another_seed_and_no_init_from_is_refused(reference, tmp_path, capsys):  # noqa: F811
    src, _ = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    cfg = yaml.safe_load((out / "checkpoint-6" / checkpoint.CONFIG).read_text())
    cfg["seed"] = 5
    (tmp_path / "seed5.yaml").write_text(yaml.safe_dump(cfg))
    argv = [a for a in STEPS if a != "--json"]
    argv[argv.index("--max-steps") + 1] = "8"
    code = main(
        ["train", "--config", str(tmp_path / "seed5.yaml"), *argv, "--output-dir", str(out)]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1] == (
        f"autotune: error: seed: 5: {out / 'checkpoint-6'} was trained with seed 0, whose random "
        "frozen weights (no --init-from) this job would not have; allowed: seed 0 to resume it, "
        "or another --output-dir"
    )
    assert [s for s, _ in checkpoint.checkpoints(out)] == [2, 4, 6]


def test_an_empty_output_dir_is_refused_not_this_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *STEPS, "--output-dir", ""]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "autotune: error: --output-dir: '' is empty; allowed: a folder's path ('.' for this one)"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag", ["--output-dir", "--init-from", "--dataset"])
def test_a_folder_that_is_a_symlink_loop_is_one_line(tmp_path, capsys, flag):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    argv = [a for a in STEPS if a != "--json"]
    out = [] if flag == "--output-dir" else ["--output-dir", str(tmp_path / "job")]
    assert main(["train", *argv, *out, flag, str(loop)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"autotune: error: {flag}: '{loop}' is a symbolic link that leads back to itself; "
        "allowed: a folder's path"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop"]


URL = "https://user:hunter22@hf.co/x/"


@pytest.mark.parametrize("flag", ["--out", "--init-from", "--output-dir"])
def test_a_url_given_for_a_folder_is_one_line_with_its_password_hidden(reference, tmp_path, flag):  # noqa: F811
    """A URL taken as a path was a folder ``https:/user:hunter22@hf.co/x/`` made here, named
    with the password in the success line (and in the job's state, for --init-from)."""
    src, _ = reference
    job = ["train", *[a for a in STEPS if a != "--json"]]
    argv = {
        "--out": ["export", str(src / "checkpoint-6"), "--out", URL],
        "--init-from": [*job, "--output-dir", "job", "--init-from", URL],
        "--output-dir": [*job, "--output-dir", URL],
    }[flag]
    done = autotune(*argv, cwd=tmp_path)
    assert one_line_error(done) == (
        f"autotune: error: {flag}: 'https://user:***@hf.co/x/' is a URL; allowed: a local "
        "folder (autotune fetches and uploads nothing)"
    )
    assert "hunter22" not in done.stdout + done.stderr
    assert list(tmp_path.iterdir()) == []


SHIELDED_AT_EXIT = """
import sys, torch
from torch.utils.data import DataLoader
from autotune.train.job.training import shield_workers
loader = DataLoader(torch.arange(64.0), batch_size=4, num_workers=int(sys.argv[1]))
shield_workers(loader)
held = iter(loader)  # alive at exit, as when a traceback's frames hold it
next(held)
print("started", flush=True)
sys.exit(3)
"""


@pytest.mark.parametrize("workers", [2, 12])
def test_a_job_exits_though_its_shielded_workers_outlive_their_iterator(workers):
    """Workers ignore SIGTERM, which is how Python's exit stops daemon children before it waits
    for them: the job kills them itself, or its exit would wait forever. The first one killed
    raised the loader's "worker is killed by signal" from its SIGCHLD handler inside the loop that
    kills them, so the others were left and the exit waited on them."""
    done = subprocess.run([sys.executable, "-c", SHIELDED_AT_EXIT, str(workers)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 3 and done.stdout == "started\n", done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_exporting_into_a_jobs_folder_under_a_checkpoints_name_is_refused(
    reference,  # noqa: F811
    tmp_path,
    capsys,
):
    """The job would take it for a corrupt checkpoint of its own (and delete it on rotation)."""
    src, _ = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    target = out / "checkpoint-99"
    assert main(["export", str(out / "checkpoint-6"), "--out", str(target)]) == 2
    assert capsys.readouterr().err == (
        f"autotune: error: --out {target}: a checkpoint's name in a job's folder, where the job "
        "would take the export for a corrupt checkpoint and delete it; give another --out\n"
    )
    assert not target.exists()


@pytest.mark.parametrize("logged_only", [False, True], ids=["checkpoints", "log only"])
@pytest.mark.parametrize("name", ["checkpoint-30", ".checkpoint-30.tmp"])
def test_exporting_into_a_jobs_folder_under_its_checkpoints_or_temporary_name_is_refused(
    reference,  # noqa: F811
    tmp_path,
    capsys,
    name,
    logged_only,
):
    """A job that has logged but not yet saved knows its folder as well: it would delete the export
    as a corrupt checkpoint, or as the unfinished one it starts afresh or writes again."""
    src, _ = reference
    out = tmp_path / "job"
    if logged_only:
        out.mkdir()
        shutil.copy(src / "metrics.jsonl", out)
    else:
        shutil.copytree(src, out)
    target = out / name
    assert main(["export", str(src / "checkpoint-6"), "--out", str(target)]) == 2
    what, taken = (
        ("a checkpoint's name", "a corrupt")
        if name.startswith("checkpoint")
        else ("a temporary checkpoint's name", "an unfinished")
    )
    assert capsys.readouterr().err == (
        f"autotune: error: --out {target}: {what} in a job's folder, where the job would take the "
        f"export for {taken} checkpoint and delete it; give another --out\n"
    )
    assert not target.exists()


def test_resuming_with_another_optimizer_says_so(reference, tmp_path, capsys):  # noqa: F811
    src, ref = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    cfg = yaml.safe_load((out / "checkpoint-6" / checkpoint.CONFIG).read_text())
    before = cfg["optimizer"]["impl"]
    cfg["optimizer"]["impl"] = after = "loop" if before != "loop" else "foreach"
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(cfg))
    argv = [a for a in STEPS if a != "--json"]
    argv[argv.index("--max-steps") + 1] = "8"
    code = main(
        ["train", "--config", str(tmp_path / "other.yaml"), *argv, "--output-dir", str(out)]
    )
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert (
        code == 0
        and (
            f"autotune: warning: {out / 'checkpoint-6'} was trained with optimizer.impl {before}; this "
            f"job goes on with {after}, which takes its optimizer state over"
        )
        in warnings
    )


def test_metrics_that_cannot_be_written_stop_the_job_on_one_line(tmp_path):
    """The disk fills while the job logs (checkpoints only at its end): one line naming the metrics
    file or TensorBoard's folder, no traceback (TensorBoard's writer thread's included)."""
    with small_disk(tmp_path / "disk", "8m") as disk:
        out = disk / "job"
        argv = ["train", "--preset", "tiny", "--synthetic", "--no-progress", "--log-steps", "1"]
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "autotune",
                *argv,
                "--max-steps",
                "400",
                "--output-dir",
                str(out),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(lambda: max(logged_steps(out), default=0) >= 1, proc)
        fill(disk)
        _, stderr = proc.communicate(timeout=240)
        err = stderr.strip().splitlines()
        assert proc.returncode == 2 and "Traceback" not in stderr and len(err) == 1, stderr
        named = (f"{out / 'metrics.jsonl'}: ", f"{out / 'tensorboard'}: ")
        assert err[0].removeprefix("autotune: error: ").startswith(named), err[0]
        assert "writing the metrics failed (No space left on device), 0 MiB free there" in err[0]


def test_a_metrics_line_cut_short_is_dropped_when_the_job_resumes(tmp_path):
    """A full disk (or a kill) cut the job's last line: the resumed job's lines stay JSON."""
    first = MetricsLog(tmp_path, 0)
    first.scalars(1, {"loss": 1.0})
    first.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"time": 2.0, "step": 2, "lo')
    again = MetricsLog(tmp_path, 1)  # resumed from checkpoint-1
    again.scalars(2, {"loss": 2.0})
    again.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["loss"] for line in lines] == [1.0, 2.0]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--batch-size", "4"], "trained with batch_size 2; this job goes on with 4 from the same"),
        (
            ["--synthetic"],
            "trained on the workload's own data (lerobot); this job goes on with synthetic",
        ),
        ([], "trained on 999 samples; the data now holds "),  # the dataset's episodes changed
    ],
)
def test_a_resume_on_other_data_or_batches_says_so(reference, tmp_path, capsys, flags, said):  # noqa: F811
    """The best.yaml or the dataset changed between save and resume: the job goes on, but not as
    the one it was, and says so."""
    src, _ = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    shutil.rmtree(out / "checkpoint-6")
    if not flags:
        path = out / "checkpoint-4" / checkpoint.STATE
        state = json.loads(path.read_text())
        state["data"]["num_samples"] = 999
        path.write_text(json.dumps(state))
    code, res, err = train(capsys, out, *flags, "--stop-at", "5")
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert code == 0 and res["start_step"] == 5 and len(warnings) == 1, err
    assert warnings[0].startswith(f"autotune: warning: {out / 'checkpoint-4'} was {said}")


def test_a_resume_without_the_dataset_it_trained_on_is_refused(reference, tmp_path, capsys):  # noqa: F811
    """--dataset left off the command would go on with the workload's own data, unsaid."""
    src, _ = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    path = out / "checkpoint-6" / checkpoint.STATE
    state = json.loads(path.read_text())
    state["config"]["data"]["dataset"] = "/data/robot"
    path.write_text(json.dumps(state))
    argv = [a for a in STEPS if a != "--json"]
    argv[argv.index("--max-steps") + 1] = "8"
    assert main(["train", *argv, "--output-dir", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"autotune: error: {out / 'checkpoint-6'} was trained on --dataset /data/robot; give it "
        "again to resume (or --dataset DIR to go on with another, or another --output-dir)"
    )
    assert [s for s, _ in checkpoint.checkpoints(out)] == [2, 4, 6]


def test_a_resume_from_a_configuration_whose_data_source_is_null_reads_the_same_data(
    reference,  # noqa: F811
    tmp_path,
    capsys,
):
    """``data.source: null`` is the workload's first source: a job started from the stock
    configuration (``lerobot``) and resumed from a YAML that leaves it out trains on the same data,
    without a warning that says otherwise."""
    src, ref = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    shutil.rmtree(out / "checkpoint-6")
    cfg = tmp_path / "same.yaml"
    cfg.write_text("batch_size: 2\n")
    code, res, err = train(capsys, out, "--config", str(cfg), "--stop-at", "5")
    assert code == 0 and "warning" not in err, err
    assert res["losses"] == ref["losses"][4:5]


def test_a_warning_hides_a_secret_it_would_name(reference, tmp_path, capsys, monkeypatch):  # noqa: F811
    """A job's warnings name the paths the user gave; a secret among them (a folder named after a
    token) is hidden on stderr and in the job's result, as errors hide it."""
    src, _ = reference
    secret = "tok-8f3a9c2e71"
    monkeypatch.setenv("ROBOT_HUB_TOKEN", secret)
    out = Path(shutil.copytree(src, tmp_path / secret / "job"))
    shutil.rmtree(out / "checkpoint-6")
    code, res, err = train(capsys, out, "--batch-size", "4", "--stop-at", "5")
    warnings = [line for line in err.splitlines() if line.startswith("autotune: warning:")]
    assert code == 0 and len(warnings) == 1, err
    assert "***" in warnings[0] and secret not in err and secret not in json.dumps(res["warnings"])
