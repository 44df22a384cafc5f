"""The long job on the CPU (tiny preset): a killed or preempted job continues exactly where an
uninterrupted one would be, a cut checkpoint is skipped, the data position survives a resume."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from autotune.cli import main
from autotune.config import config_from_dict
from autotune.data.sampler import ShardedInfiniteSampler
from autotune.train.job import checkpoint
from autotune.train.job.training import position_loader
from autotune.workloads import get_workload

pytestmark = pytest.mark.slow
STEPS = [
    "--preset",
    "tiny",
    "--max-steps",
    "6",
    "--save-steps",
    "2",
    "--log-steps",
    "1",
    "--no-progress",
    "--json",
]


def train(capsys, out: Path, *extra: str) -> tuple[int, dict, str]:
    code = main(["train", *STEPS, "--output-dir", str(out), *extra])
    captured = capsys.readouterr()
    return code, json.loads(captured.out.strip().splitlines()[-1]), captured.err


def start(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "autotune", "train", *STEPS, "--output-dir", str(out), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def logged_steps(out: Path) -> list[int]:
    path = out / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [r["step"] for r in map(json.loads, lines) if "loss" in r]


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the job did not get there in time"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, dict]:
    """An uninterrupted run of 6 steps, a checkpoint every 2."""
    out = tmp_path_factory.mktemp("reference") / "job"
    assert main(["train", *STEPS, "--output-dir", str(out)]) == 0
    # its losses from metrics.jsonl: logged every step, each the exact float (the mean of one)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return out, {"losses": [r["loss"] for r in records if "loss" in r]}


def test_the_uninterrupted_run_writes_whole_checkpoints_and_its_logs(reference):
    out, ref = reference
    assert [s for s, _ in checkpoint.checkpoints(out)] == [2, 4, 6]
    st = checkpoint.read_state(out / "checkpoint-4")
    assert st["step"] == 4 and st["data"]["next_draw"] == 4 * 2  # 4 steps of 2 samples on one rank
    assert st["config"]["optimizer"]["total_steps"] == 6  # the schedule spans --max-steps
    assert set(st["files"]) == {
        "model.safetensors",
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pt",
        "config.yaml",
    }
    assert logged_steps(out) == [1, 2, 3, 4, 5, 6] and len(ref["losses"]) == 6
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert not list(out.glob(".checkpoint-*"))


def test_sigterm_saves_and_exits_0_then_kill_9_then_the_same_command_continues_step_for_step(
    reference, tmp_path, capsys
):
    _, ref = reference
    out = tmp_path / "job"
    # preempted: SIGTERM to the whole process group (loader workers too) saves the current step, exit 0
    proc = start(out)
    wait_for(lambda: max(logged_steps(out), default=0) >= 1, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr
    res = json.loads(stdout.strip().splitlines()[-1])
    stopped = res["final_step"]
    assert res["preempted"] and stopped < 4 and (out / f"checkpoint-{stopped}").is_dir()
    assert res["losses"] == ref["losses"][:stopped]
    # the same command resumes there; killed with SIGKILL between two checkpoints
    proc = start(out)
    after = (stopped // 2 + 1) * 2  # its next checkpoint
    wait_for(
        lambda: (out / f"checkpoint-{after}").is_dir() and max(logged_steps(out)) > after, proc
    )
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    resume_at = checkpoint.checkpoints(out)[-1][0]
    assert stopped < resume_at < 6
    # and again: it continues after the newest complete checkpoint, exactly as the uninterrupted run
    code, res, _ = train(capsys, out)
    assert (
        code == 0
        and res["start_step"] == resume_at + 1
        and res["resumed_from"].endswith(f"checkpoint-{resume_at}")
    )
    assert res["losses"] == ref["losses"][resume_at:]  # exactly: same data, same random draws
    assert logged_steps(out) == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]  # what the killed run logged past its checkpoint is dropped


def test_a_cut_checkpoint_is_skipped_with_one_warning(reference, tmp_path, capsys):
    src, ref = reference
    out = Path(shutil.copytree(src, tmp_path / "job"))
    cut = out / "checkpoint-6" / "optimizer.pt"
    cut.write_bytes(cut.read_bytes()[:1000])
    code, res, err = train(capsys, out)
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "checkpoint-6" in warnings[0] and "optimizer.pt" in warnings[0]
    assert code == 0 and res["start_step"] == 5 and res["losses"] == ref["losses"][4:]


def test_the_data_position_starts_the_loader_at_the_draws_consumed():
    cfg = config_from_dict({"preset": "tiny", "batch_size": 2, "device": "cpu"})
    w = get_workload("gr00t_n16")

    def batches(loader, n):
        it = iter(loader)
        return [next(it)["images"] for _ in range(n)]

    whole = batches(w.make_loader("tiny", cfg.data, 2, seed=0), 5)
    resumed = batches(position_loader(w.make_loader("tiny", cfg.data, 2, seed=0), 3 * 2, 2, 1), 2)
    assert all(torch.equal(a, b) for a, b in zip(whole[3:], resumed))
    # on several ranks the global stream continues: no draw twice, none skipped
    ranks = [
        iter(ShardedInfiniteSampler(10, seed=0, rank=r, world_size=2, start=6)) for r in range(2)
    ]
    draws = sorted(next(it)[0] for it in ranks for _ in range(3))
    assert draws == list(range(6, 12))


def test_two_processes_resume_from_the_checkpoint_rank_0_wrote(tmp_path, capsys):
    from tests.ports import free_port

    two = [
        "--synthetic",
        "--nproc",
        "2",
        "--max-steps",
        "4",
        "--save-steps",
        "2",
        "--nnodes",
        "1",
        "--node-rank",
        "0",
    ]
    out = tmp_path / "job"
    first = main(
        [
            "train",
            "--preset",
            "tiny",
            "--no-progress",
            "--json",
            "--output-dir",
            str(out),
            *two,
            "--rdzv-endpoint",
            f"127.0.0.1:{free_port()}",
        ]
    )
    whole = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert first == 0 and whole["world_size"] == 2 and len(whole["losses"]) == 4
    assert (
        len(torch.load(out / "checkpoint-2" / "rng_state.pt", weights_only=True)) == 2
    )  # every rank's
    shutil.rmtree(out / "checkpoint-4")
    assert (
        main(
            [
                "train",
                "--preset",
                "tiny",
                "--no-progress",
                "--json",
                "--output-dir",
                str(out),
                *two,
                "--rdzv-endpoint",
                f"127.0.0.1:{free_port()}",
            ]
        )
        == 0
    )
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["start_step"] == 3 and again["losses"] == whole["losses"][2:]


def test_two_processes_refuse_a_folder_of_unusable_checkpoints_together_on_one_line(
    tmp_path, capfd
):
    """Rank 0 refused the folder and ended while rank 1 waited to hear which checkpoint it chose:
    rank 1 ended on a broken connection, printed as its error line, under torchrun's traceback."""
    from tests.ports import free_port

    out = tmp_path / "job"
    (out / "checkpoint-2").mkdir(parents=True)
    (out / "checkpoint-2" / checkpoint.STATE).write_text("{}")
    (out / "metrics.jsonl").write_text("")  # a job killed before it logged: a job's folder
    argv = ["train", "--preset", "tiny", "--synthetic", "--no-progress", "--nproc", "2",
            "--max-steps", "4", "--output-dir", str(out), "--nnodes", "1", "--node-rank", "0",
            "--rdzv-endpoint", f"127.0.0.1:{free_port()}"]  # fmt: skip
    assert main(argv) == 2
    state = out / "checkpoint-2" / checkpoint.STATE
    why = f"{state} is missing or unreadable (KeyError)"
    assert capfd.readouterr().err.splitlines() == [
        f"autotune: warning: skipping checkpoint {out / 'checkpoint-2'}: {why}",
        f"autotune: error: training failed (config): --output-dir {out}: none of its 1 "
        f"checkpoints can be resumed from (the newest: {why}); training from step 1 would write "
        "over them: move them out of it to start afresh, or give another --output-dir",
    ]
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-2", "metrics.jsonl"]


KILLED_RANK = """
import os, signal, sys, time
if os.environ["RANK"] == "1":
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)  # until torchrun stops it
"""


def test_a_rank_a_signal_ended_is_one_line_without_torchruns_report(tmp_path):
    """It could say nothing itself; torchrun's report was a traceback and a table of every rank."""
    script = tmp_path / "rank.py"
    script.write_text(KILLED_RANK)
    done = subprocess.run([sys.executable, "-m", "autotune.train.job.torchrun", "--standalone",
                           "--nproc-per-node=2", str(script)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and re.fullmatch(
        r"autotune: error \(rank 1\): killed by SIGKILL \(pid \d+\)", lines[0]
    ), done.stderr


def test_mixing_the_measuring_run_and_the_job_is_refused(capsys):
    assert main(["train", "--save-steps", "2"]) == 2
    assert "--save-steps belongs to a training job: give --max-steps N" in capsys.readouterr().err
    assert main(["train", "--max-steps", "2"]) == 2
    assert "--max-steps needs --output-dir" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, line",
    [
        (["--nnodes", "2"], "--nnodes 2 needs --rdzv-endpoint HOST:PORT (the rendezvous every node joins); "
         "without it each node would train alone into the same --output-dir"),
        (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "node0:29500"],
         "--node-rank: 2 is out of range; allowed: 0 to 1 (one less than --nnodes 2)"),
        (["--node-rank", "1"], "--node-rank: 1 is out of range; allowed: 0 to 0 (one less than --nnodes 1)"),
        (["--nnodes", "2", "--rdzv-endpoint", "node0"],
         "--rdzv-endpoint: 'node0' is not HOST:PORT; allowed: e.g. node0:29500 (a port from 1 to 65535)"),
        (["--nnodes", "2", "--rdzv-endpoint", "node0:99999"],
         "--rdzv-endpoint: 'node0:99999' is not HOST:PORT; allowed: e.g. node0:29500 (a port from 1 to 65535)"),
        (["--nnodes", "2", "--rdzv-endpoint", "node0:29500", "--rdzv-backend", "etcd2"],
         "--rdzv-backend: 'etcd2' is not one of ['static', 'c10d']"),
    ],
)  # fmt: skip
def test_nodes_that_cannot_meet_are_one_line_before_the_output_dir(tmp_path, capsys, flags, line):
    """A job on several nodes whose options torchrun would reject with a traceback, or (without an
    endpoint, or with a node rank past the nodes) run alone on each node into the shared folder."""
    out = tmp_path / "job"
    argv = ["train", "--synthetic", "--preset", "tiny", "--max-steps", "2", "--output-dir", out]
    assert main([*map(str, argv), *flags]) == 2
    assert capsys.readouterr().err.strip() == f"autotune: error: {line}"
    assert not out.exists()


@pytest.mark.parametrize("exp_avg", ["fp32", "bf16"])
def test_a_master_weight_job_resumes_step_for_step_and_checkpoints_fp32_weights(
    tmp_path, capsys, exp_avg
):
    """optimizer.impl: master: the checkpoint holds the fp32 masters (the files of any other impl), and a
    job stopped at a checkpoint continues exactly as the uninterrupted one (with a bf16 first moment
    too: it is saved and loaded as it is)."""
    from safetensors import safe_open

    cfg = tmp_path / "master.yaml"
    cfg.write_text(f"optimizer: {{impl: master, exp_avg_dtype: {exp_avg}}}\n")
    args = ["--config", str(cfg), "--max-steps", "4"]
    code, whole, _ = train(capsys, tmp_path / "whole", *args)
    assert code == 0 and len(whole["losses"]) == 4
    code, first, _ = train(capsys, tmp_path / "cut", *args, "--stop-at", "2")
    assert code == 0 and first["losses"] == whole["losses"][:2]
    with safe_open(str(tmp_path / "cut" / "checkpoint-2" / "model.safetensors"), "pt") as f:
        dtypes = {f.get_tensor(k).dtype for k in f.keys()}  # noqa: SIM118 (safe_open is not a mapping)
        dit = f.get_tensor("dit.blocks.0.ff_in.weight")
    assert (
        dtypes == {torch.float32} and dit.to(torch.bfloat16).float().ne(dit).any()
    )  # the master, not its bf16 copy
    code, rest, _ = train(capsys, tmp_path / "cut", *args)
    assert code == 0 and rest["start_step"] == 3 and rest["losses"] == whole["losses"][2:]


def test_a_bf16_weight_job_checkpoints_and_resumes_step_for_step(tmp_path, capsys):
    """precision.trainable_dtype: bf16 keeps bf16 moments beside fp32 step counts in the optimizer's
    state: its checkpoint is written (each dtype in a host buffer of its own, which torch.save takes)
    and a job stopped at it continues exactly as the uninterrupted one."""
    cfg = tmp_path / "bf16.yaml"
    cfg.write_text("precision: {trainable_dtype: bf16}\n")
    args = ["--config", str(cfg), "--max-steps", "4"]
    code, whole, _ = train(capsys, tmp_path / "whole", *args)
    assert code == 0 and len(whole["losses"]) == 4
    assert [s for s, _ in checkpoint.checkpoints(tmp_path / "whole")] == [2, 4]
    code, first, _ = train(capsys, tmp_path / "cut", *args, "--stop-at", "2")
    assert code == 0 and first["losses"] == whole["losses"][:2]
    loaded = checkpoint.latest(tmp_path / "cut", warn=pytest.fail)
    assert {t.dtype for t in loaded.weights.values()} == {torch.bfloat16}
    code, rest, _ = train(capsys, tmp_path / "cut", *args)
    assert code == 0 and rest["start_step"] == 3 and rest["losses"] == whole["losses"][2:]


def test_a_job_without_save_steps_keeps_its_end(tmp_path, capsys):
    """No --save-steps: the job still saves its last step, and what it trained can be exported."""
    out = tmp_path / "job"
    argv = [
        "train",
        "--preset",
        "tiny",
        "--max-steps",
        "3",
        "--no-progress",
        "--output-dir",
        str(out),
    ]
    assert main(argv) == 0
    assert [s for s, _ in checkpoint.checkpoints(out)] == [3]
    assert main(["export", str(out / "checkpoint-3"), "--out", str(tmp_path / "export")]) == 0
    assert (tmp_path / "export" / "model.safetensors.index.json").is_file()


def test_a_gr00t_n17_job_with_its_model_knobs_resumes_step_for_step(tmp_path, capsys):
    """N1.7 draws dropout (0.2 in the VL adapter) and state dropout besides the flow-matching noise,
    and runs its frozen backbone without gradients here: a job stopped at a checkpoint continues
    exactly as the uninterrupted one, its loader workers at the data position."""
    cfg = tmp_path / "n17.yaml"
    cfg.write_text(
        "workload: gr00t_n17\nbatch_size: 2\nmodel: {skip_dead_work: true, "
        "frozen_prefix_no_grad: true, attended_kv_only: true, category_matmul: grouped}\n"
    )
    args = ["--config", str(cfg), "--max-steps", "4"]
    code, whole, _ = train(capsys, tmp_path / "whole", *args)
    assert code == 0 and len(whole["losses"]) == 4
    code, first, _ = train(capsys, tmp_path / "cut", *args, "--stop-at", "2")
    assert code == 0 and first["losses"] == whole["losses"][:2]
    code, rest, err = train(capsys, tmp_path / "cut", *args)
    assert code == 0 and "warning" not in err, err
    assert rest["start_step"] == 3 and rest["losses"] == whole["losses"][2:]
