"""``python -m autotune.benchmarks.long_job``: one invocation runs the plain, saved and resumed
phases and writes the summary the GPU measurement reports (issue 22's Show)."""

from __future__ import annotations

import json

import pytest

from autotune.benchmarks.long_job import main, markdown, summarize


def _run(losses, final, checkpoints, start=1, steady_s=1.0, median_step_s=None):
    """A phase's result: steps after the first timed, ``steady_s`` in all, each of them ``median_step_s`` but stalls."""
    steps = len(losses) - 1
    return {
        "losses": losses,
        "grad_norms": [1.0] * len(losses),
        "start_step": start,
        "final_step": final,
        "checkpoints": checkpoints,
        "samples_per_s_overall": 2 * steps / steady_s,
        "samples_per_s": 2 / (median_step_s or steady_s / steps),
        "steady_steps": steps,
        "steady_s": steady_s,
        "batch_size": 2,
        "world_size": 1,
    }


def _ckpt(step, snapshot_s):
    return {
        "step": step,
        "path": f"checkpoint-{step}",
        "bytes": 2**30,
        "snapshot_s": snapshot_s,
        "write_s": 3.0,
    }


def test_the_summary_compares_with_plain_and_counts_the_checkpoints_inside_the_timed_steps():
    plain = _run([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3], 8, [], steady_s=7.0)
    saved = _run(
        [1.0, 0.9, 0.8, 0.7], 4, [_ckpt(2, 5.0), _ckpt(4, 1.0)], steady_s=4.0, median_step_s=1.0
    )
    resumed = _run(
        [0.6, 0.5, 0.4, 0.35],
        8,
        [_ckpt(6, 4.0), _ckpt(8, 1.0)],
        start=5,
        steady_s=4.0,
        median_step_s=1.0,
    )
    s = summarize({"plain": plain, "saved": saved, "resumed": resumed}, 0.05, 4)
    assert s["plain_samples_per_s"] == pytest.approx(2.0)
    assert s["checkpointed_samples_per_s"] == pytest.approx(2 * 6 / 8.0)
    assert s["checkpoint_cost"] == pytest.approx(0.25)
    # checkpoints 4 and 8 end their phase: their stalls are outside the timed steps
    assert s["checkpoints_inside_timed_steps"] == [2, 6]
    assert s["seconds_per_checkpoint"] == pytest.approx((8.0 - 6 * 1.0) / 2)
    # the same cost against the checkpointing runs' own median step (no other machine's run needed)
    assert s["checkpoint_cost_in_run"] == pytest.approx(0.25) and s[
        "plain_cost_in_run"
    ] == pytest.approx(0.0)
    assert (
        s["checkpoint_gib"] == 1.0 and s["snapshot_s_first"] == 4.5 and s["snapshot_s_later"] == 1.0
    )
    assert s["saved_vs_plain"]["identical"] and s["saved_vs_plain"]["steps"] == 4
    r = s["resume"]
    assert r["start_step"] == 5 and r["steps"] == 4 and not r["identical"]
    assert r["loss_rel_diff"] == pytest.approx(abs(0.4625 - 0.45) / 0.45) and r["passed"]
    table = markdown(s)
    assert "PASS" in table and "[2, 6]" in table


def test_a_failed_phase_leaves_the_others_in_the_summary():
    plain = _run([1.0, 0.9, 0.8, 0.7], 4, [])
    s = summarize({"plain": plain, "saved": {"error": "exit code 1", "wall_s": 3.0}}, 0.05, 2)
    assert s["plain_samples_per_s"] == pytest.approx(6.0)
    assert (
        "resume" not in s
        and "checkpoint_cost" not in s
        and s["phases"]["saved"]["error"] == "exit code 1"
    )
    assert "-" in markdown(s)


@pytest.mark.slow
def test_one_invocation_runs_the_three_phases_and_writes_the_summary(tmp_path, capsys):
    out, jobs = tmp_path / "out", tmp_path / "jobs"
    argv = [
        "--preset",
        "tiny",
        "--synthetic",
        "--steps",
        "6",
        "--save-steps",
        "2",
        "--resume-at",
        "4",
        "--log-steps",
        "2",
        "--out",
        str(out),
        "--jobs-dir",
        str(jobs),
    ]
    assert main(argv) == 0
    s = json.loads((out / "summary.json").read_text())
    assert set(s["phases"]) == {"plain", "saved", "resumed"}
    assert s["phases"]["saved"]["final_step"] == 4 and s["phases"]["resumed"]["start_step"] == 5
    # on the CPU the resumed run trains exactly what the uninterrupted one trains
    assert s["resume"]["identical"] and s["resume"]["passed"] and s["saved_vs_plain"]["identical"]
    assert [c["step"] for c in s["checkpoints"]] == [2, 4, 6]
    assert (
        s["checkpoint_gib"] > 0 and s["checkpointed_samples_per_s"] > 0 and "checkpoint_cost" in s
    )
    assert {p.name for p in out.iterdir()} >= {
        "summary.json",
        "runs.json",
        "metrics-plain.jsonl",
        "metrics-resumed.jsonl",
    }
    assert not list(out.glob("**/checkpoint-*")) and [
        p.name for p in (jobs / "saved").glob("checkpoint-*")
    ] == ["checkpoint-6"]
    assert "PASS" in capsys.readouterr().out
    # the same command again measures afresh (the old folders are not resumed from)
    assert main(argv) == 0
    again = json.loads((out / "summary.json").read_text())
    assert again["phases"]["saved"]["start_step"] == 1 and again["resume"]["identical"]


@pytest.mark.parametrize("phase", ["plain", "saved"])
def test_a_folder_of_no_job_under_the_phases_names_is_never_removed(tmp_path, capsys, phase):
    """Each invocation starts its jobs in fresh folders by removing plain/ and saved/ under
    --jobs-dir: a folder of the user's there (--jobs-dir ~ and ~/saved) was deleted unasked."""
    mine = tmp_path / phase / "notes.txt"
    mine.parent.mkdir()
    mine.write_text("kept")
    argv = ["--preset", "tiny", "--synthetic", "--steps", "6", "--save-steps", "2"]
    argv += ["--resume-at", "4", "--out", str(tmp_path / "out"), "--jobs-dir", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"long_job: error: --jobs-dir {tmp_path}: {tmp_path / phase} holds files of no autotune "
        "job, which a fresh run would delete; give another --jobs-dir (a new or empty folder)"
    ]
    assert mine.read_text() == "kept"


@pytest.mark.parametrize(
    "flag, text, problem",
    [
        ("--merge", None, "no such file"),
        ("--merge", "{not json", "not a runs.json (a JSON mapping of phase -> run)"),
        ("--merge", "[1, 2]", "not a runs.json (a JSON mapping of phase -> run)"),
        ("--merge", "\xff", "not a runs.json (a JSON mapping of phase -> run)"),
        ("--config", None, "no such file"),
        ("--config", "batch_size: 0\n", "batch_size: 0 is out of range; allowed: an integer >= 1"),
    ],
)
def test_a_file_it_cannot_read_is_one_line_and_makes_no_folder(
    tmp_path, capsys, flag, text, problem
):
    """--merge of a missing or broken runs.json, and a --config refused, were tracebacks."""
    path = tmp_path / "given"
    if text is not None:
        path.write_bytes(text.encode("latin-1"))
    argv = ["--out", str(tmp_path / "out"), flag, str(path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"long_job: error: {path}: {problem}"]
    assert not (tmp_path / "out").exists()


def test_a_count_below_one_names_its_flag(tmp_path, capsys):
    """--steps -1 was refused as '--resume-at 1000 must lie inside 1..-2'."""
    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path / "out"), "--steps", "-1"])
    assert exc.value.code == 2
    assert "--steps: -1 is out of range; allowed: an integer >= 1" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
