"""Faults a study survives (issue 18): real tuners, real signals, real files; what was written before stays.

The crashy workload (``tests/search/crashy.py``) hangs at batch size 5 (in the worker) and 6 (in
two loader workers) for ``$CRASHY_HANG_S`` seconds or until ``$CRASHY_RELEASE`` exists, and crashes at 3.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psutil
import pytest
from optuna.trial import TrialState

from autotune.cli import main
from autotune.config import load_config
from autotune.search.journal import SafeJournalFile, open_journal
from autotune.search.settings import KEY as SETTINGS
from autotune.search.stage import STUDY_ATTR as STAGES
from autotune.search.trials import RECORD, reason_of, record_of
from tests import tmpfs
from tests.clirun import autotune, one_line_error
from tests.search.crashy import MIRROR_PASSWORD
from tests.trialprocs import children_with_commands, guard_of, trial_processes

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RUN = [
    "run",
    "--space",
    "quick",
    "--synthetic",
    "--confirm-rounds",
    "0",
    "--converge-after",
    "0",
    "--steps",
    "1",
    "--warmup",
    "1",
    "--batch-size",
    "2",
    "--profile-steps",
    "0",
    "--seed",
    "1",
]
NAME = "gr00t_n16-tiny-quick"
HANG = "tests.search.crashy.Workload-tiny-hang"


def journal_study(out: Path, name: str = NAME) -> optuna.Study:
    """The study as Optuna's own journal reader sees it (the format stays Optuna's)."""
    backend = optuna.storages.journal.JournalFileBackend(str(out / "study.journal"))
    return optuna.load_study(study_name=name, storage=optuna.storages.JournalStorage(backend))


def summary(trials) -> list[tuple]:
    return [(t.number, t.state, t.value, t.params, t.user_attrs) for t in trials]


@pytest.fixture(scope="module")
def finished_study(tmp_path_factory) -> Path:
    """A real two-trial study, copied by the tests that damage it."""
    out = tmp_path_factory.mktemp("study") / "run"
    assert main([*RUN, "--trials", "2", "--out", str(out)]) == 0
    return out


def copy_of(study: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(study, tmp_path / "run"))


# A tuner started as a user would, on the crashy workload's hang (batch size 5, or 6 with loader workers).


def hang_space(tmp_path: Path) -> Path:
    space = tmp_path / "hang.yaml"
    space.write_text("knobs:\n  batch_size: {type: categorical, choices: [2, 5, 6], group: data}\n")
    return space


def hang_argv(tmp_path: Path, batch_size: int, trials: int = 1) -> list[str]:
    return [
        "run",
        "--workload",
        "tests.search.crashy:Workload",
        "--preset",
        "tiny",
        "--space",
        str(hang_space(tmp_path)),
        "--trials",
        str(trials),
        "--synthetic",
        "--batch-size",
        str(batch_size),
        "--steps",
        "1",
        "--warmup",
        "1",
        "--profile-steps",
        "0",
        "--confirm-rounds",
        "0",
        "--converge-after",
        "0",
        "--out",
        str(tmp_path / "run"),
    ]


def start_tuner(tmp_path: Path, argv: list[str], **env: str) -> subprocess.Popen:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "PYTHONPATH": str(ROOT), **env}
    return subprocess.Popen(
        [sys.executable, "-m", "autotune", *argv],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for_trial(tmp_path: Path, processes: int, seconds: float = 240.0) -> Path:
    """The running trial's temporary folder, once at least ``processes`` of its processes run."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for folder in (tmp_path / "tmp").glob("autotune-run-*"):
            if (folder / "config.yaml").exists() and len(trial_processes(folder)) >= processes:
                return folder
        time.sleep(0.3)
    raise AssertionError("the trial did not start")


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, by its relative path, with its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def gone(pids: list[int], seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(
            psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
            for p in pids
        ):
            return True
        time.sleep(0.2)
    return False


def test_a_second_tuner_on_the_folder_is_refused_naming_the_first(tmp_path, capsys):
    """Row 1: the second tuner touches nothing; the first goes on with its stock trial."""
    first = start_tuner(tmp_path, hang_argv(tmp_path, 5))
    try:
        wait_for_trial(tmp_path, 2)
        journal = tmp_path / "run" / "study.journal"
        before = journal.read_bytes()
        assert main(hang_argv(tmp_path, 5)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert (
            f"is in use by autotune run (pid {first.pid} on host {socket.gethostname()}, since "
            in err[0]
        )
        assert (
            journal.read_bytes() == before and first.poll() is None
        )  # the first tuner's trial runs on
    finally:
        first.send_signal(signal.SIGTERM)
        output = first.communicate(timeout=60)[0]
    # stopped as a scheduler stops it: one line says so, as Ctrl-C's does
    assert first.returncode == 128 + signal.SIGTERM, output
    assert "Traceback" not in output and output.splitlines()[-1] == "autotune: stopped by SIGTERM"
    assert journal.read_bytes().startswith(
        before
    )  # the first tuner appended its trial's end, nothing rewritten
    (stock,) = [
        t for t in journal_study(tmp_path / "run", HANG).trials if t.state != TrialState.WAITING
    ]
    assert stock.user_attrs["stock"] and reason_of(stock) == "interrupted"


def test_a_killed_tuner_takes_its_trial_processes_and_folder_along(tmp_path):
    """Row 5: ``kill -9`` of the tuner; its trial's guard kills the worker and its two loader workers.
    Nothing in the run folder changes after the kill (no process of the trial writes on there), and
    the journal still reads: its trial is RUNNING, for the next tuner to fail and measure again."""
    tuner = start_tuner(tmp_path, hang_argv(tmp_path, 6))
    folder = wait_for_trial(tmp_path, 4)  # the guard, the worker, two loader workers
    pids = trial_processes(folder) + [
        p.pid for p in psutil.Process(tuner.pid).children()
    ]  # and a zygote
    before = files_of(tmp_path / "run")
    tuner.kill()
    tuner.wait()
    assert gone(pids), f"trial processes left behind: {[p for p in pids if psutil.pid_exists(p)]}"
    assert not folder.exists()
    time.sleep(1)  # a process left behind would write on meanwhile
    assert files_of(tmp_path / "run") == before
    (running,) = journal_study(tmp_path / "run", HANG).trials
    assert (
        running.state == TrialState.RUNNING
        and running.params == {"batch_size": 6}
        and running.user_attrs["stock"]
    )


def test_a_tuner_reaps_what_a_killed_tuner_and_its_guard_left(tmp_path):
    """Row 5: tuner and guard both killed (the guard first frozen, so it cannot act): the next tuner
    kills the orphaned trial processes, removes the folder, and measures the lost trial again."""
    argv = hang_argv(tmp_path, 6)
    tuner = start_tuner(tmp_path, argv)
    folder = wait_for_trial(tmp_path, 4)
    forked = guard_of(folder)  # the zygote's child, not the tuner's, when the trial was forked
    guard = psutil.Process(forked) if forked else psutil.Process(tuner.pid).children()[0]
    guard.suspend()
    tuner.kill()
    tuner.wait()
    guard.kill()
    orphans = [p for p in trial_processes(folder) if p != guard.pid]
    assert len(orphans) >= 3 and folder.exists()  # the worker and its loader workers run on
    journal = tmp_path / "run" / "study.journal"
    before = journal.read_bytes()

    again = start_tuner(
        tmp_path, argv, CRASHY_HANG_S="0"
    )  # the same command; this time batch size 6 trains
    output = again.communicate(timeout=600)[0]
    assert again.returncode == 0, output
    assert f"removed {folder}: a trial of autotune (pid {tuner.pid}), which was killed" in output
    assert gone(orphans, 5) and not folder.exists()
    assert journal.read_bytes().startswith(before)  # appended to, never rewritten
    lost, measured = journal_study(tmp_path / "run", HANG).trials
    assert lost.state == TrialState.FAIL and reason_of(lost) == "interrupted"
    assert (
        f"its tuner {socket.gethostname()}:{tuner.pid} stopped before the trial ended"
        in record_of(lost).failure.error
    )
    assert measured.state == TrialState.COMPLETE and measured.params == lost.params == {
        "batch_size": 6
    }
    assert measured.user_attrs["queued_again_from"] == 0 and measured.user_attrs["stock"]


@pytest.mark.parametrize(
    "make, kind",
    [
        (os.mkfifo, "a pipe, device or socket"),
        (lambda path: path.symlink_to(path.parent.parent / "theirs"), "a link"),
        (os.mkdir, "a folder"),
    ],
    ids=["fifo", "link", "folder"],
)
def test_a_run_lock_that_is_no_file_is_one_line_naming_it(tmp_path, capsys, make, kind):
    """A folder handed over whose run.lock is a pipe, a link or a folder: the line said the lock
    "keeps changing; is another program removing it?", or "cannot write there (Too many levels of
    symbolic links)"; it now says what is there, and nothing changes."""
    out = tmp_path / "run"
    out.mkdir()
    (tmp_path / "theirs").write_text("their file\n")
    make(out / "run.lock")
    assert main([*RUN, "--trials", "1", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"autotune: error: --out {out}: its run.lock is {kind}, not the lock file autotune makes there "
        "(no autotune process holds it): remove it, or give another --out"
    ]
    assert [p.name for p in out.iterdir()] == ["run.lock"]
    assert (tmp_path / "theirs").read_text() == "their file\n"


def test_a_cut_journal_loses_only_its_cut_entry(finished_study, tmp_path, capsys):
    """Row 2: what a crash or a full disk leaves, here while the tuner wrote the end of the last
    trial. Read with a warning; the run writes on after the last whole entry (the cut bytes kept
    aside), every entry before it stands, and the trial whose end was cut is measured again."""
    out = copy_of(finished_study, tmp_path)
    journal = out / "study.journal"
    whole = journal.read_bytes()
    boundary = whole.rfind(b'{"op_code":6,')  # the last trial's state: COMPLETE, and its value
    cut = boundary + (whole.index(b"\n", boundary) - boundary) // 2
    journal.write_bytes(whole[:cut])
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "study.journal").write_bytes(whole[:boundary])
    before = summary(journal_study(kept).trials)
    assert [t[1] for t in before] == [TrialState.COMPLETE, TrialState.RUNNING]

    assert main(["report", str(out)]) == 0
    assert "its last entry (line" in capsys.readouterr().err
    assert main([*RUN, "--trials", "2", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"moved to {out / f'study.journal.cut-{boundary}'}" in err
    assert (out / f"study.journal.cut-{boundary}").read_bytes() == whole[boundary:cut]
    assert journal.read_bytes().startswith(whole[:boundary])
    after = journal_study(out).trials
    assert summary(after)[0] == before[0]
    lost, again = after[1:]
    assert lost.params == before[1][3] and reason_of(lost) == "interrupted"
    assert (
        again.state == TrialState.COMPLETE
        and again.params == lost.params
        and again.user_attrs["queued_again_from"] == 1
    )


def test_a_cut_journal_keeps_its_cut_bytes_beside_any_file_of_that_name(tmp_path):
    """A handed-over folder whose journal ends cut, with study.journal.cut-OFFSET already there (a
    link to a file elsewhere, or an earlier cut's bytes): the cut bytes were written through the
    link over that file. They now go to a name of their own, and the file there is left as it was."""
    journal = tmp_path / "study.journal"
    optuna.create_study(study_name="s", storage=open_journal(journal))
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"op_code": 5, "worker_id"')
    theirs = tmp_path / "theirs"
    theirs.write_text("their file\n")
    (tmp_path / f"study.journal.cut-{len(whole)}").symlink_to(theirs)
    (tmp_path / f"study.journal.cut-{len(whole)}.1").write_bytes(b"an earlier cut")
    optuna.create_study(study_name="t", storage=open_journal(journal))
    assert theirs.read_text() == "their file\n"
    assert (tmp_path / f"study.journal.cut-{len(whole)}.1").read_bytes() == b"an earlier cut"
    assert (
        tmp_path / f"study.journal.cut-{len(whole)}.2"
    ).read_bytes() == b'{"op_code": 5, "worker_id"'
    assert sorted(optuna.get_all_study_names(open_journal(journal))) == ["s", "t"]


@pytest.fixture
def small_disk(tmp_path):
    """A 32 MiB tmpfs of the test's own, to fill."""
    with tmpfs.small_disk(tmp_path / "disk", "32m") as disk:
        yield disk


def end_near_a_page(journal: Path, room: int = 16) -> None:
    """Append a study attribute (``pad``) that makes the journal end ``room`` bytes before a page
    boundary: on the full disk its next entry is written in part (``room`` bytes), then fails."""
    page = os.statvfs(journal).f_frsize

    def entry(n: int) -> dict:
        return {"op_code": 2, "worker_id": "test-pad", "study_id": 0, "user_attr": {"pad": "x" * n}}

    bare = len(json.dumps(entry(0), separators=(",", ":"))) + 1
    SafeJournalFile(journal).append_logs([entry(-(journal.stat().st_size + bare + room) % page)])
    assert journal.stat().st_size % page == page - room


def test_a_disk_that_fills_during_a_trial_loses_only_that_trial(small_disk, tmp_path):
    """Row 2, a real full disk: the run folder on a tmpfs that fills while a trial runs. The tuner's
    first entry after the trial cannot be written: one line, exit 2, the journal cut back to its last
    whole entry (its write got as far as the disk's last bytes), no file of the folder changed. Once there is room, the same command fails the trial
    (its tuner was gone), measures it again, and every trial before it stands as it was."""
    out = small_disk / "run"
    argv = hang_argv(tmp_path, 2)
    argv[argv.index("--out") + 1] = str(out)
    first = start_tuner(tmp_path, argv)
    assert first.wait(timeout=600) == 0, (
        first.stdout.read()
    )  # the stock trial (batch size 2) is measured
    journal = out / "study.journal"
    study = optuna.load_study(study_name=HANG, storage=open_journal(journal))
    (stock_before,) = summary(study.trials)
    study.enqueue_trial({"batch_size": 5})  # hangs until released (the disk full), then trains
    argv[argv.index("--trials") + 1] = "2"

    release = tmp_path / "release"  # beside the small disk: it can be written once that is full
    tuner = start_tuner(tmp_path, argv, CRASHY_HANG_S="300", CRASHY_RELEASE=str(release))
    folder = wait_for_trial(tmp_path, 2)  # the guard and the worker of trial #1
    pids = trial_processes(folder)
    end_near_a_page(journal)
    before = files_of(out)
    filler = tmpfs.fill(small_disk)
    release.touch()
    output = tuner.communicate(timeout=600)[0]
    assert tuner.returncode == 2, output
    assert "Traceback" not in output, output
    assert (
        f"autotune: error: {journal}: cannot write the study's journal (No space left on device); nothing of the "
        "last change was kept, the entries before it stand"
    ) in output.splitlines(), output
    after = files_of(out)
    logs = {
        k for k in before if k.startswith("logs/")
    }  # the trial's worker wrote its log while there was room
    assert "run.lock" in before and "run.lock" not in after  # the tuner's lock went with it
    before.pop("run.lock")
    assert {k: v for k, v in after.items() if k not in logs} == {
        k: v for k, v in before.items() if k not in logs
    }
    assert all(after[k].startswith(before[k]) for k in logs)
    assert gone(pids, 5) and not folder.exists()

    filler.unlink()
    again = start_tuner(tmp_path, argv, CRASHY_HANG_S="0")
    output = again.communicate(timeout=600)[0]
    assert again.returncode == 0, output
    assert (
        f"trial #1 was lost: its tuner {socket.gethostname()}:{tuner.pid} stopped before the trial ended"
        in output
    )
    assert journal.read_bytes().startswith(before["study.journal"])
    stock, lost, measured = journal_study(out, HANG).trials
    assert summary([stock]) == [stock_before]  # as the first run left it
    assert (
        lost.state == TrialState.FAIL
        and reason_of(lost) == "interrupted"
        and lost.params == {"batch_size": 5}
    )
    assert measured.state == TrialState.COMPLETE and measured.params == {"batch_size": 5}
    assert measured.user_attrs["queued_again_from"] == 1


def test_a_disk_that_fills_in_the_confirmation_is_named_by_the_file_it_refused(
    finished_study, small_disk, monkeypatch, capsys
):
    """The disk fills while stock and the best are measured again: the one line names
    confirmation.json, the first file it refused (it named run.json, which the end of the run
    rewrites after it), and every file written before stays as it was."""
    import autotune.search.confirm

    out = Path(shutil.copytree(finished_study, small_disk / "run"))
    add_a_best_far_above_stock(journal_study(out))
    before = files_of(out)
    measure = autotune.search.confirm.confirm

    def confirm_then_fill(*args, **kwargs):
        confirmation = measure(*args, **kwargs)
        tmpfs.fill(small_disk)
        return confirmation

    monkeypatch.setattr(autotune.search.confirm, "confirm", confirm_then_fill)
    argv = [*RUN, "--trials", "3", "--out", str(out)]
    argv[argv.index("--confirm-rounds") + 1] = "1"
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"autotune: error: {out / 'confirmation.json'}: No space left on device (rerun with --debug "
        "for the traceback)"
    ], err
    after = files_of(out)
    assert all(after[name] == before[name] for name in ("best.yaml", "parity.json", "report.html"))
    assert json.loads(after["run.json"])["finished_at"] is None


def test_a_disk_full_while_a_trial_prints_costs_its_log_only(small_disk, tmp_path):
    """The run folder's disk full for a moment while the stock trial prints (batch size 12): its log
    stops where the disk filled, and the trial trains on and is measured. The pump that copies the
    trial's output into its log closed the pipe at the first write the disk refused, so the trial's next
    print died of a broken pipe, recorded as the configuration's failure (``error``), and the study
    stopped on it."""
    out = small_disk / "run"
    argv = hang_argv(tmp_path, 12)
    argv[argv.index("--out") + 1] = str(out)
    (tmp_path / "hang.yaml").write_text(
        "knobs:\n  batch_size: {type: categorical, choices: [12, 2], group: data}\n"
    )
    release = tmp_path / "release"  # beside the small disk: it can be written once that is full
    tuner = start_tuner(tmp_path, argv, CRASHY_HANG_S="300", CRASHY_RELEASE=str(release))
    wait_for_trial(tmp_path, 2)
    log = out / "logs" / "trial-0000.log"
    assert log.read_bytes() == b""  # nothing printed yet
    filler = tmpfs.fill(small_disk)
    release.touch()
    printed = Path(f"{release}.printed")
    deadline = time.monotonic() + 120
    while not printed.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert printed.exists() and tuner.poll() is None
    time.sleep(1)  # the pump has read what the trial printed, into the full disk
    filler.unlink()
    Path(f"{release}.more").touch()
    output = tuner.communicate(timeout=600)[0]
    assert tuner.returncode == 0, output
    assert "Traceback" not in output
    (stock,) = journal_study(out, HANG).trials
    assert stock.state == TrialState.COMPLETE, record_of(stock).failure


def test_a_corrupt_journal_is_one_line_and_left_as_it_is(finished_study, tmp_path, capsys):
    """Row 3: garbage after the last entry, or in the middle: run and report name the file and the line."""
    out = copy_of(finished_study, tmp_path)
    journal = out / "study.journal"
    lines = journal.read_bytes().splitlines(keepends=True)
    for at in (len(lines), 3):
        damaged = b"".join(lines[:at]) + b"garbage\n" + b"".join(lines[at:])
        journal.write_bytes(damaged)
        for argv in ([*RUN, "--trials", "3", "--out", str(out)], ["report", str(out)]):
            assert main(argv) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert err == [
                f"autotune: error: {journal}: line {at + 1} is not a journal entry: not JSON (Expecting value: "
                f"line 1 column 1 (char 0)); the {at} lines before it are intact: move the file aside, or keep "
                f"them with `head -n {at}`"
            ], err
        assert journal.read_bytes() == damaged


@pytest.mark.parametrize(
    "make, what",
    [
        (os.mkfifo, "not a regular file (a device, pipe or socket); expected a file"),
        (os.mkdir, "is a folder, not a file"),
    ],
    ids=["fifo", "folder"],
)
def test_a_journal_that_is_no_file_is_one_line(finished_study, tmp_path, make, what):
    """study.journal a pipe (run blocked reading it, for ever) or a folder ("line 0 is not a journal
    entry ... the -1 lines before it are intact"): one line naming it, and it stays as it is."""
    out = copy_of(finished_study, tmp_path)
    (out / "study.journal").unlink()
    make(out / "study.journal")
    proc = autotune(*RUN, "--trials", "3", "--out", out, timeout=120)
    assert one_line_error(proc) == f"autotune: error: {out / 'study.journal'}: {what}"
    assert proc.returncode == 2 and (out / "study.journal").exists()


def test_a_line_longer_than_any_entry_is_one_line_and_read_no_further(
    finished_study, tmp_path, capsys
):
    """A journal that ends in 65 MiB without a newline (a sparse file: no disk used) is no journal a
    crash leaves: one line naming the file and the line, the file read no further than 64 MiB."""
    out = copy_of(finished_study, tmp_path)
    journal = out / "study.journal"
    lines = journal.read_bytes().count(b"\n")
    with open(journal, "r+b") as f:
        f.truncate(journal.stat().st_size + (65 << 20))
    assert main(["report", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"autotune: error: {journal}: line {lines + 1} is not a journal entry: longer than 64 MiB without "
        f"a newline; the {lines} lines before it are intact: move the file aside, or keep them with "
        f"`head -n {lines}`"
    ]


def set_last_attr(journal: Path, key: str, value: object) -> None:
    """Give the last entry of ``journal`` that sets the user attribute ``key`` the value ``value``
    (an edit by hand, or bits that rotted inside a string: the line stays JSON)."""
    lines = journal.read_text().splitlines(keepends=True)
    at = max(i for i, line in enumerate(lines) if key in json.loads(line).get("user_attr", {}))
    entry = json.loads(lines[at])
    entry["user_attr"][key] = value
    lines[at] = json.dumps(entry) + "\n"
    journal.write_text("".join(lines))


@pytest.mark.parametrize(
    "key, where, allowed, report",
    [
        (RECORD, "trial #1: user_attrs.record", "the JSON object of a trial record", True),
        (SETTINGS, f"study {NAME!r}: user_attrs.measuring_settings", "the JSON object of", False),
        (STAGES, f"study {NAME!r}: user_attrs.autotune.diagnosis", "the JSON list of the", True),
    ],
)
def test_a_journal_value_that_is_not_json_is_one_line(
    finished_study, tmp_path, capsys, key, where, allowed, report
):
    """A value autotune keeps as JSON text in the study (a trial's record, the measuring settings, the
    guided search's stages) that does not parse: run says so in one line naming the trial or study,
    the key and the value; the report, which reads the record and the stages, is made without what
    it cannot read and says so on the page; every entry of the journal stays as it was."""
    out = copy_of(finished_study, tmp_path)
    journal = out / "study.journal"
    set_last_attr(journal, key, '[{"stage": 1, ')
    (
        out / "diagnosis.json"
    ).unlink()  # the report reads the stages from the study, as of a running one
    damaged = journal.read_bytes()
    run = [*RUN, "--trials", "3", "--out", str(out)]
    assert main(run) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"autotune: error: {where}: '[{{\"stage\": 1, ' is not JSON (Expecting "
    ), err
    assert f"allowed: {allowed}" in err[0], err
    if report:
        assert main(["report", str(out)]) == 0
        page = html.unescape((out / "report.html").read_text())
        assert f"{where}: '[{{\"stage\": 1, ' is not JSON" in page
        assert " left out" in page
    assert journal.read_bytes().startswith(damaged)


@pytest.mark.parametrize(
    "key, where",
    [
        (RECORD, "trial #1: user_attrs.record"),
        (SETTINGS, f"study {NAME!r}: user_attrs.measuring_settings"),
        (STAGES, f"study {NAME!r}: user_attrs.autotune.diagnosis"),
    ],
)
def test_a_journal_value_nested_past_the_stack_is_one_line(
    finished_study, tmp_path, capsys, key, where
):
    """A value kept as JSON text nested deeper than Python's stack (no value autotune writes): run
    says so in one line naming the trial or study and the key, not a RecursionError traceback, and
    the report is made without it."""
    out = copy_of(finished_study, tmp_path)
    journal = out / "study.journal"
    set_last_attr(journal, key, "[" * 100_000 + "]" * 100_000)
    (out / "diagnosis.json").unlink()  # the report reads the stages from the study
    damaged = journal.read_bytes()
    assert main([*RUN, "--trials", "3", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"autotune: error: {where}: '[[[["), err
    assert "is not JSON (maximum recursion depth exceeded" in err[0], err
    assert main(["report", str(out)]) == 0
    assert journal.read_bytes().startswith(damaged)


def test_a_report_changes_nothing_in_the_run_folder(finished_study, tmp_path):
    """A run folder someone hands over is data: reading it for a report written elsewhere touches
    no file of it (the journal keeps its time), and works on a read-only mount of the folder."""
    out = copy_of(finished_study, tmp_path)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert main(["report", str(out), "--out", str(tmp_path / "r.html")]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    frozen = tmp_path / "ro"
    frozen.mkdir()
    if subprocess.run(["mount", "--bind", "-o", "ro", str(out), str(frozen)]).returncode != 0:
        pytest.skip("a read-only bind mount needs root")
    try:
        assert main(["report", str(frozen), "--out", str(tmp_path / "ro.html")]) == 0
    finally:
        subprocess.run(["umount", str(frozen)], check=True)
    assert (tmp_path / "ro.html").is_file()


def test_a_rerun_with_nothing_to_do_leaves_best_yaml(finished_study, tmp_path, capsys):
    """Row 13: a new --memory-budget, and no trial to run under it: best.yaml is not rewritten."""
    out = copy_of(finished_study, tmp_path)
    best = out / "best.yaml"
    text, stamp = best.read_bytes(), best.stat().st_mtime_ns
    assert main([*RUN, "--trials", "2", "--memory-budget", "1GiB", "--out", str(out)]) == 0
    assert "nothing new in study" in capsys.readouterr().out
    assert best.read_bytes() == text and best.stat().st_mtime_ns == stamp


def test_a_rerun_removes_the_temporary_files_a_killed_run_left(finished_study, tmp_path):
    """A run killed between writing a file's temporary copy and renaming it (``strace -e
    inject=rename:signal=SIGKILL`` showed ``.best.yaml.8nsd3b_m`` left) leaves that copy, which no run
    removed: the next run of the folder removes those of its own files; one written in the last
    minute (``autotune report`` of the running study at work) and other names stay."""
    out = copy_of(finished_study, tmp_path)
    left = [
        out / ".best.yaml.8nsd3b_m",
        out / ".report.html.x2vhywzk",
        out / ".trials.csv.a_b1c2d3",
    ]
    young, others = (
        out / ".report.html.k2j3h4x_",
        [out / ".best.yaml.keep", out / ".notes.md.abcdefgh"],
    )
    for path in [*left, young, *others]:
        path.write_text("half-written")
    for path in [*left, *others]:
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    assert main([*RUN, "--trials", "2", "--out", str(out)]) == 0
    assert not any(path.exists() for path in left)
    assert young.exists() and all(path.exists() for path in others)


@pytest.mark.parametrize("key", ["speedup_vs_stock", "step_time_ms"])
def test_a_rerun_with_nothing_to_do_writes_a_damaged_best_yaml_anew(
    finished_study, tmp_path, capsys, key
):
    """best.yaml's provenance with a number turned to text (an edit by hand, a file of another
    program's): the run with nothing new to measure kept it and ended in a traceback formatting it
    (the speed-up line, the fine-tuning time); it writes best.yaml anew from the study."""
    out = copy_of(finished_study, tmp_path)
    best = out / "best.yaml"
    text = best.read_text()
    damaged = re.sub(rf"^  {key}: .*$", f"  {key}: fast", text, flags=re.M)
    assert damaged != text
    best.write_text(damaged)
    assert main([*RUN, "--trials", "2", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "nothing new" not in captured.out and captured.err == ""
    assert isinstance(load_config(best).provenance[key], float)


def add_a_best_far_above_stock(study: optuna.Study) -> None:
    """A third trial that "beat stock by far": stock's configuration and measured record, at 100x
    its value (the study confirms it at its end)."""
    stock = study.trials[0]
    study.add_trial(
        optuna.trial.create_trial(
            params=stock.params,
            distributions=stock.distributions,
            value=100 * stock.value,
            user_attrs={k: v for k, v in stock.user_attrs.items() if k != "stock"},
        )
    )


def test_a_rerun_confirms_a_best_yaml_left_unconfirmed(finished_study, tmp_path, capsys):
    """best.yaml written without a confirmation (``--confirm-rounds 0`` here; a time budget that ended first
    on a GPU): the same study run again with nothing new to try confirms it, and a third run leaves it."""
    out = copy_of(finished_study, tmp_path)
    study = journal_study(out)
    add_a_best_far_above_stock(study)
    assert main([*RUN, "--trials", "3", "--out", str(out)]) == 0
    assert (
        not load_config(out / "best.yaml").provenance["confirmed"]
        and "confirming" not in capsys.readouterr().out
    )
    again = [
        *RUN[: RUN.index("--confirm-rounds")],
        "--confirm-rounds",
        "1",
        *RUN[RUN.index("--confirm-rounds") + 2 :],
    ]
    assert main([*again, "--trials", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "nothing new" not in printed and "confirming, round 1: trial #2" in printed
    assert load_config(out / "best.yaml").provenance["confirmation"]["rounds"] == 1
    assert main([*again, "--trials", "3", "--out", str(out)]) == 0
    assert "nothing new in study" in capsys.readouterr().out


def a_kept_confirmation(**edits) -> dict:
    """A confirmation of the study of :func:`add_a_best_far_above_stock` (stock #0, the best #2), as a
    former run writes it to ``confirmation.json``, with ``edits``."""
    run = {
        "round": 1,
        "samples_per_s": 2.0,
        "step_time_spread": 0.1,
        "host_busy": 0.0,
        "wall_s": 3.0,
        "loader_bound": False,
        "compile_s": 0.0,
        "compile_cache": {},
        "error": None,
    }
    kept = {"stock_trial": 0, "trial": 2, "samples_per_s": 4.0, "stock_samples_per_s": 2.0, "speedup": 2.0,
            "study_speedup": 100.0, "rounds": 2, "spread": {"0": 0.0, "2": 0.0}, "medians": {"0": 2.0, "2": 4.0},
            "runs": [{**run, "trial": 0}, {**run, "trial": 2, "samples_per_s": 4.0}], "note": "",
            "measured_rounds": {"0": 1, "2": 1}}  # fmt: skip
    return {**kept, **edits}


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '"confirmed"',
        json.dumps(a_kept_confirmation(trial=7)),
        json.dumps(a_kept_confirmation(rounds="2")),
        json.dumps(a_kept_confirmation(speedup="2.0x")),
        json.dumps(a_kept_confirmation(medians=5)),
        json.dumps(a_kept_confirmation(spread={"0": "wide", "2": 0.0})),
        json.dumps(a_kept_confirmation(speedup=float("nan"))),
        "[" * 100_000 + "]" * 100_000,
    ],
    ids=[
        "list",
        "string",
        "trial-not-in-study",
        "rounds-text",
        "speedup-text",
        "medians-number",
        "spread-text",
        "speedup-nan",
        "nested-past-the-stack",
    ],  # fmt: skip
)
def test_a_damaged_confirmation_is_measured_again_not_kept(finished_study, tmp_path, capsys, text):
    """``confirmation.json`` is a record of the folder, not an order: one of another shape (a hand's
    edit, another program's) is not kept, so its numbers never reach best.yaml; the confirmation is
    measured again and the file written anew, exit 0, no traceback."""
    out = copy_of(finished_study, tmp_path)
    add_a_best_far_above_stock(journal_study(out))
    (out / "confirmation.json").write_text(text)
    argv = [*RUN, "--trials", "3", "--out", str(out)]
    argv[argv.index("--confirm-rounds") + 1] = "1"
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "kept from the last run" not in printed and "confirming, round 1: trial #2" in printed
    confirmation = load_config(out / "best.yaml").provenance["confirmation"]
    assert confirmation["rounds"] == 1 and [r["trial"] for r in confirmation["runs"]] == [0, 2]
    assert json.loads((out / "confirmation.json").read_text()) == confirmation


def test_a_confirmation_of_the_same_trials_is_kept(finished_study, tmp_path, capsys):
    """The counterpart: a well-formed confirmation of the same stock and best is kept, not measured again."""
    out = copy_of(finished_study, tmp_path)
    add_a_best_far_above_stock(journal_study(out))
    (out / "confirmation.json").write_text(json.dumps(a_kept_confirmation()))
    argv = [*RUN, "--trials", "3", "--out", str(out)]
    argv[argv.index("--confirm-rounds") + 1] = "1"
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "kept from the last run" in printed and "confirming" not in printed
    assert load_config(out / "best.yaml").provenance["speedup_vs_stock"] == 2.0


def test_a_run_without_confirmation_keeps_the_confirmation_of_the_same_trials(
    finished_study, tmp_path, capsys
):
    """``--confirm-rounds 0`` measures nothing again: a continued study whose best is the one a former
    run confirmed keeps that confirmation in best.yaml, not the study's own (noisier) speed-up."""
    out = copy_of(finished_study, tmp_path)
    add_a_best_far_above_stock(journal_study(out))
    (out / "confirmation.json").write_text(json.dumps(a_kept_confirmation()))
    argv = [*RUN, "--trials", "3", "--out", str(out)]
    argv[argv.index("--confirm-rounds") + 1] = "0"
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "confirmation of #2 against stock kept from the last run" in printed
    prov = load_config(out / "best.yaml").provenance
    assert prov["confirmed"] and prov["speedup_vs_stock"] == 2.0
    assert prov["confirmation"] == a_kept_confirmation()


@pytest.mark.parametrize("trials", ["0", "-1"])
def test_trials_below_one_is_refused(tmp_path, capsys, trials):
    """Row 13: not the default count, not a "memory budget" error."""
    assert main([*RUN, "--trials", trials, "--out", str(tmp_path / "run")]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"autotune: error: --trials: {trials} is out of range; allowed: an integer >= 1"
    )
    assert not (tmp_path / "run").exists()


def test_out_that_cannot_be_written_is_one_line(finished_study, tmp_path, capsys):
    """Row 11: --out an existing file, or a place nothing can be created (run, profile, report)."""
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    cases = [
        ([*RUN, "--out", str(afile)], f"--out {afile}: is a file, not a folder"),
        (
            [*RUN, "--out", "/proc/x"],
            "--out /proc/x: cannot write there (No such file or directory)",
        ),
        (
            ["profile", "--preset", "tiny", "--out", str(afile)],
            f"--out {afile}: is a file, not a folder",
        ),
        (
            ["profile", "--preset", "tiny", "--out", "/proc/x"],
            "--out /proc/x: cannot create the folder (No such file",
        ),
        (
            ["report", str(finished_study), "--out", "/proc/x/r.html"],
            "--out /proc/x/r.html: cannot write the file",
        ),
        (
            ["report", str(finished_study), "--out", str(tmp_path)],
            f"--out {tmp_path}: is a folder; give the file",
        ),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"autotune: error: {message}"), (argv, err)
    assert afile.read_text() == "mine\n"


def test_a_study_whose_every_trial_fails_says_why_and_still_reports(tmp_path, capsys):
    """Row 12: not "no trial ran within the memory budget": the commonest failure, and report.html."""
    space = tmp_path / "s.yaml"
    space.write_text(
        "knobs:\n  optimizer.impl: {type: categorical, choices: [foreach, fused], group: optimizer}\n"
    )
    argv = [
        "run",
        "--workload",
        "tests.search.crashy:Workload",
        "--preset",
        "tiny",
        "--space",
        str(space),
        "--trials",
        "1",
        "--synthetic",
        "--batch-size",
        "3",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--profile-steps",
        "0",
        "--out",
        str(tmp_path / "run"),
    ]
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert (
        len(err) == 1
        and "the stock trial (#0) failed (error): RuntimeError: crashy: this batch size always crashes"
        in err[0]
        and "the study stops: fix the workload or its data" in err[0]
    ), err
    assert "ran within the memory budget" not in err[0]
    assert (
        tmp_path / "run" / "report.html"
    ).is_file() and f"report: {tmp_path / 'run' / 'report.html'}" in captured.out
    log = tmp_path / "run" / "logs" / "trial-0000.log"
    assert f"; its log: {log}; " in err[0]  # the log it names tells where the workload failed
    text = log.read_text()
    assert "Traceback (most recent call last):" in text and "crashy.py" in text
    assert text.rstrip().endswith("RuntimeError: crashy: this batch size always crashes")


def test_a_tuner_stopped_in_its_confirmation_leaves_the_study_unfinished(finished_study, tmp_path):
    """SIGTERM while stock and the best are measured again: best.yaml stays as it was, and run.json
    loses its ``finished_at``, so the report says the study is interrupted, not finished; the same
    command then confirms and finishes it."""
    out = copy_of(finished_study, tmp_path)
    study = journal_study(out)
    add_a_best_far_above_stock(study)
    argv = [*RUN, "--trials", "3", "--out", str(out)]
    argv[argv.index("--confirm-rounds") + 1] = "2"
    best = (out / "best.yaml").read_bytes()
    tuner = start_tuner(tmp_path, argv)
    seen = []
    for line in tuner.stdout:
        seen.append(line)
        if line.startswith("confirming, round 1: stock"):
            tuner.send_signal(signal.SIGTERM)  # three runs of the confirmation to go
            break
    output = "".join(seen) + tuner.communicate(timeout=120)[0]
    assert tuner.returncode == 128 + signal.SIGTERM, output
    assert (out / "best.yaml").read_bytes() == best
    assert json.loads((out / "run.json").read_text())["finished_at"] is None
    assert "running or interrupted" in (out / "report.html").read_text()

    again = start_tuner(tmp_path, argv)
    output = again.communicate(timeout=600)[0]
    assert again.returncode == 0, output
    assert "confirmed in " in output  # 2 rounds, up to 4 where they vary
    assert "A new study created" not in output  # Optuna's log line, of the space check's probe
    assert json.loads((out / "run.json").read_text())["finished_at"] is not None


def test_a_secret_the_workload_shows_is_written_nowhere_and_its_flood_is_cut(tmp_path):
    """The workload prints $HF_TOKEN, then 3 MiB of output, and raises quoting the token and a URL
    with a password: no file of the run folder and no line of the tuner holds either, and the
    trial's log keeps its first and last MiB (the traceback at its end) with a line saying how much
    was left out."""
    token = "hf_aB3dE5gH7jK9mN1pQ"
    argv = hang_argv(tmp_path, 10)
    (tmp_path / "hang.yaml").write_text(
        "knobs:\n  batch_size: {type: categorical, choices: [10, 2], group: data}\n"
    )
    tuner = start_tuner(tmp_path, argv, HF_TOKEN=token)
    output = tuner.communicate(timeout=600)[0]
    assert tuner.returncode == 2, output
    out = tmp_path / "run"
    assert "the hub refused the token ***" in output and token not in output
    assert MIRROR_PASSWORD not in output and "https://bot:***@mirror" in output
    for secret in (token, MIRROR_PASSWORD):
        assert [name for name, data in files_of(out).items() if secret.encode() in data] == []
    log = (out / "logs" / "trial-0000.log").read_text()
    assert log.startswith("crashy: logging in with ***\n")
    assert len(log) < (2 << 20) + 4096 and "bytes of output left out ...]\n" in log
    assert log.rstrip().endswith(
        "the hub refused the token *** (mirror https://bot:***@mirror.example.com)"
    )


def test_an_error_naming_a_file_that_is_not_utf8_is_recorded_and_reported(tmp_path, capsys):
    """The workload's message holds a lone surrogate (a file name's bytes that did not decode): the
    failure is recorded with the name written out, trials.csv and report.html are written, one line."""
    argv = hang_argv(tmp_path, 11)
    (tmp_path / "hang.yaml").write_text(
        "knobs:\n  batch_size: {type: categorical, choices: [11, 2], group: data}\n"
    )
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "RuntimeError: crashy: cannot read episode-caf\\udce9.parquet" in err[0]
    )
    out = tmp_path / "run"
    assert "episode-caf\\udce9.parquet" in (out / "trials.csv").read_text()
    assert "episode-caf\\udce9.parquet" in (out / "report.html").read_text()
    (stock, _) = journal_study(out, HANG).trials
    assert reason_of(stock) == "error"


def test_ctrl_c_while_a_run_makes_its_dataset_is_one_line(tmp_path):
    """Ctrl-C in the terminal (SIGINT to the whole process group) while the first run makes the
    dataset it caches: the process making it prints no traceback of its own and goes with the
    tuner, leaving no half-made folder in the cache."""
    cache = tmp_path / "cache"
    argv = [a for a in hang_argv(tmp_path, 2) if a != "--synthetic"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUTOTUNE_CACHE": str(cache)}
    tuner = subprocess.Popen([sys.executable, "-m", "autotune", *argv], env=env, cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)  # fmt: skip
    maker = None
    deadline = time.monotonic() + 120
    while maker is None and time.monotonic() < deadline and tuner.poll() is None:
        children = children_with_commands(tuner.pid)
        maker = next((p for p, command in children if "spawn_main" in command), None)
        time.sleep(0.05)
    assert maker is not None, tuner.communicate()[0]
    time.sleep(0.3)  # in its start-up, importing torch
    os.killpg(tuner.pid, signal.SIGINT)
    output = tuner.communicate(timeout=120)[0]
    assert tuner.returncode == 130, output
    assert "Traceback" not in output and output.splitlines()[-1] == "autotune: interrupted", output
    assert gone([maker.pid], 10)
    assert [p.name for p in (cache / "datasets").iterdir() if not p.name.endswith(".lock")] == []


def test_a_dataset_cache_that_cannot_be_written_is_one_line_naming_its_variable(
    tmp_path, capsys, monkeypatch
):
    """$AUTOTUNE_CACHE a file (as a path nothing can be made under): the line says which cache and
    how to give another, not only the errno of a path the user never named; no run folder is left."""
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    monkeypatch.setenv("AUTOTUNE_CACHE", str(afile))
    argv = [a for a in hang_argv(tmp_path, 2) if a != "--synthetic"]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"autotune: error: $AUTOTUNE_CACHE {afile}: cannot make {afile / 'datasets'} (Not a "
        "directory); set AUTOTUNE_CACHE to a folder you can write"
    ]
    assert afile.read_text() == "mine\n" and not (tmp_path / "run").exists()


def test_a_run_that_fails_while_finishing_is_not_marked_finished(finished_study, tmp_path, capsys):
    """best.yaml cannot be written (a folder stands at its name): the run ends with one line, and
    run.json keeps no ``finished_at`` (it said "finished" over a study whose best.yaml was never
    written), so the report says the study did not end."""
    out = copy_of(finished_study, tmp_path)
    study = journal_study(out)
    add_a_best_far_above_stock(study)
    (out / "best.yaml").unlink()
    (out / "best.yaml").mkdir()
    assert main([*RUN, "--trials", "3", "--out", str(out)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "best.yaml" in err[0], err
    assert json.loads((out / "run.json").read_text())["finished_at"] is None
    assert "running or interrupted" in (out / "report.html").read_text()
