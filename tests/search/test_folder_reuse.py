"""A run folder keeps one study: ``--out`` of a finished study given to another study (another space,
workload or storage) is refused with one line and nothing in the folder changes; the first study's
own command still continues it."""

from __future__ import annotations

import optuna
import pytest

from autotune.cli import main
from autotune.search.journal import open_journal
from tests.search.test_faults import RUN, files_of

pytestmark = pytest.mark.slow


def test_another_study_on_a_finished_studys_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    first = [*RUN, "--trials", "1", "--out", str(out)]
    assert main(first) == 0
    capsys.readouterr()
    before = files_of(out)
    space = tmp_path / "other.yaml"
    space.write_text("knobs:\n  batch_size: {type: categorical, choices: [2, 4], group: data}\n")
    for argv, other in (
        ([*RUN, "--trials", "1", "--out", str(out), "--space", str(space)], "gr00t_n16-tiny-other"),
        (
            [
                *RUN,
                "--trials",
                "1",
                "--out",
                str(out),
                "--workload",
                "tests.search.crashy:Workload",
            ],
            "tests.search.crashy.Workload-tiny-quick",
        ),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"autotune: error: --out {out}: holds the study 'gr00t_n16-tiny-quick', and this command's is "
            f"{other!r} (another workload, preset, space or --base); a run folder keeps one study, whose "
            "best.yaml, trials.csv, report and logs another would overwrite: give another --out (the first "
            "study's own command continues it)"
        ]
        assert files_of(out) == before
    assert main([*first[:-4], "--trials", "2", "--out", str(out)]) == 0  # the same study continues
    assert (
        "continuing study 'gr00t_n16-tiny-quick': 1 trials done, 1 to go" in capsys.readouterr().out
    )


def test_the_same_study_name_kept_elsewhere_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text('{"study_name": "gr00t_n16-tiny-quick", "storage": null}')
    url = "postgresql://u:2024#Spring@127.0.0.1:1/x"
    assert main([*RUN, "--trials", "1", "--out", str(out), "--storage", url]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"autotune: error: --out {out}: its study 'gr00t_n16-tiny-quick' is kept in the folder "
        "(study.journal), and this command's in postgresql://u:***@127.0.0.1:1/x: give another --out, "
        "or the same --storage"
    )


def test_a_folder_of_another_programs_files_is_refused_and_left_as_it_is(tmp_path, capsys):
    """No run.json naming a study, no journal: a best.yaml (the user's own configuration), a report
    and a run.json of another program are not a study of autotune's, and a run would overwrite them."""
    out = tmp_path / "theirs"
    (out / "logs").mkdir(parents=True)
    (out / "best.yaml").write_text("learning_rate: 0.1\n")
    (out / "report.html").write_text("<html>their report</html>\n")
    (out / "run.json").write_text('{"tool": "another", "version": 3}\n')
    (out / "logs" / "trial-0000.log").write_text("their log\n")
    before = files_of(out)
    assert main([*RUN, "--trials", "1", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"autotune: error: --out {out}: holds run.json, best.yaml, report.html, logs of no autotune study "
        "(no run.json names one, no study.journal holds one), which a run would overwrite: give another "
        "--out (a new or empty folder)"
    ]
    assert files_of(out) == before and sorted(p.name for p in out.iterdir()) == [
        "best.yaml",
        "logs",
        "report.html",
        "run.json",
    ]


@pytest.mark.parametrize("text", ["[]", "null", '"gr00t_n16-tiny-quick"'])
def test_a_run_json_that_is_no_object_is_one_line_and_left_as_it_is(tmp_path, capsys, text):
    """The folder's journal holds the study and its run.json is JSON but no object (damaged, or
    written by hand): refused as an unreadable run.json is, not a traceback, and nothing changes."""
    out = tmp_path / "run"
    out.mkdir()
    optuna.create_study(
        study_name="gr00t_n16-tiny-quick", storage=open_journal(out / "study.journal")
    )
    (out / "run.json").write_text(text + "\n")
    before = files_of(out)
    assert main([*RUN, "--trials", "1", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"autotune: error: --out {out}: its run.json cannot be read (not a JSON object: {text}); it "
        "names the study the folder holds: give another --out, or restore the file"
    ]
    assert files_of(out) == before


def test_a_run_json_nested_past_the_stack_is_one_line_and_left_as_it_is(tmp_path, capsys):
    """JSON deeper than Python's stack (no run.json a run wrote): refused as an unreadable run.json
    is, not a RecursionError traceback."""
    out = tmp_path / "run"
    out.mkdir()
    optuna.create_study(
        study_name="gr00t_n16-tiny-quick", storage=open_journal(out / "study.journal")
    )
    (out / "run.json").write_text("[" * 100_000 + "]" * 100_000)
    before = files_of(out)
    assert main([*RUN, "--trials", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"autotune: error: --out {out}: its run.json cannot be read (maximum recursion depth exceeded"
    ), err
    assert files_of(out) == before


@pytest.mark.parametrize("name", ["logs", "profiles", "compile_cache"])
def test_a_folder_of_the_run_that_is_a_link_is_refused(tmp_path, capsys, name):
    """A study's folder handed over whose logs (profiles, compile cache) is a link to another folder:
    the run would write its trials' files there, replacing ones of the same names (a log is made
    anew: the file under its name is removed first), so it is refused in one line naming the link,
    and nothing there or in the folder changes."""
    out = tmp_path / "run"
    out.mkdir()
    optuna.create_study(
        study_name="gr00t_n16-tiny-quick", storage=open_journal(out / "study.journal")
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "trial-0000.log").write_text("someone's own file\n")
    (out / name).symlink_to(elsewhere)
    before, theirs = files_of(out), files_of(elsewhere)
    assert main([*RUN, "--trials", "1", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"autotune: error: --out {out}: its {name} is a link (to {elsewhere}), and a run writes its "
        f"trials' files into that folder, replacing files of the same names there: make {out / name} a "
        "folder of its own, or give another --out"
    ]
    assert files_of(out) == before and files_of(elsewhere) == theirs


@pytest.mark.parametrize("dangling", [False, True])
def test_a_journal_that_is_a_link_is_refused(tmp_path, capsys, dangling):
    """A folder handed over whose study.journal links to a file elsewhere (another run's journal, or
    a name where none is yet): the run would append its trials there, so it is refused in one line
    naming the link, and the file it points to is neither changed nor made."""
    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    target = elsewhere / "study.journal"
    if not dangling:
        optuna.create_study(study_name="gr00t_n16-tiny-quick", storage=open_journal(target))
    (out / "study.journal").symlink_to(target)
    before, theirs = files_of(out), files_of(elsewhere)
    assert main([*RUN, "--trials", "1", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"autotune: error: --out {out}: its study.journal is a link (to {target}), and a run appends "
        f"its trials to that file: copy the journal into {out} in place of the link, or give another --out"
    ]
    assert files_of(out) == before and files_of(elsewhere) == theirs
