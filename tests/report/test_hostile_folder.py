"""A run folder is data: a run.json, journal or summary of the wrong shape costs the page the part it
spoils (with a note), never the report (a traceback)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from autotune.report import build_report, write_report
from tests.config.test_bad_files import LAUGHS

H200 = Path(__file__).parents[2] / "reports" / "examples" / "full-1gpu-h200"  # a real study
JOURNAL = "study.journal"
STOCK_VALUE = '"values":[66.30351760425944]'  # trial #0's completion in the journal


@pytest.fixture
def run(tmp_path) -> Path:
    folder = Path(shutil.copytree(H200, tmp_path / "run"))
    (folder / "report.html").unlink()
    return folder


def _edit_journal(run: Path, old: str, new: str) -> None:
    text = (run / JOURNAL).read_text()
    assert old in text
    (run / JOURNAL).write_text(text.replace(old, new))


def test_a_run_json_field_of_another_type_is_left_out_with_a_note(run):
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**info, "memory_budget_bytes": "big", "nproc": [1]}))
    report = build_report(run)
    assert report.run.memory_budget_bytes is None and report.run.nproc is None
    assert "run.json: memory_budget_bytes is 'big', not int | None; left out" in report.notes
    assert "run.json: nproc is [1], not int | None; left out" in report.notes
    write_report(run)  # the budget line of the memory figure is drawn from the best.yaml's budget
    assert (run / "report.html").is_file()


def test_a_run_json_nested_past_the_stack_is_a_note(run):
    (run / "run.json").write_text("[" * 100_000 + "]" * 100_000)
    report = build_report(run)
    assert any(n.startswith("run.json could not be read (maximum recursion") for n in report.notes)


def test_a_nan_objective_in_the_journal_is_not_learnt_from(run):
    """Optuna's journal replays NaN; its in-memory copy for the importances refuses it."""
    _edit_journal(run, STOCK_VALUE, '"values":[NaN]')
    write_report(run)
    assert (run / "report.html").is_file()


STOCK_CONSTRAINT = '"constraint":-0.7656215073051895'  # trial #0's memory constraint


@pytest.mark.parametrize("value", ['"abc"', "[1]", "null", "NaN"])
def test_a_constraint_that_is_not_a_number_reads_as_over_budget(run, value):
    """A constraint of another type was a traceback (float() of it) instead of a page."""
    _edit_journal(run, STOCK_CONSTRAINT, f'"constraint":{value}')
    write_report(run)
    assert build_report(run).trial(0).outcome == "over budget"


@pytest.mark.parametrize("value", ["5", '["a"]', "{}"])
def test_a_profile_dir_that_is_not_a_path_falls_back_to_the_trials_folder(run, value):
    """A profile_dir of another type was a traceback (Path() of it) instead of a page."""
    _edit_journal(run, '"profile_dir":"profiles/trial-0000"', f'"profile_dir":{value}')
    write_report(run)
    assert build_report(run).stock_profile.path == "profiles/trial-0000"


@pytest.mark.parametrize("value", ["5", '["a"]', "{}"])
def test_a_final_profile_that_is_not_a_path_falls_back_to_the_trials_folder(run, value):
    _set(run, "diagnosis.json", lambda d: d.update(final_profile=json.loads(value)))
    write_report(run)
    assert build_report(run).best_profile.path == "profiles/trial-0001"


def _set_trial_attr(run: Path, trial: int, key: str, value) -> None:
    """Set a user attribute of ``trial`` right after it was created (a finished trial takes none)."""
    lines = (run / JOURNAL).read_text().splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if '"op_code":4,' in line][trial]
    op = {"op_code": 8, "worker_id": "w", "trial_id": trial, "user_attr": {key: value}}
    lines.insert(at + 1, json.dumps(op) + "\n")
    (run / JOURNAL).write_text("".join(lines))


@pytest.mark.parametrize("value", [["a", 1], {"a": 1}])
def test_a_reference_name_of_another_type_is_shown_as_text(run, value):
    """A list or mapping as a trial's reference name was a traceback (an unhashable dict key)."""
    _set_trial_attr(run, 2, "reference", value)
    write_report(run)
    assert build_report(run).summary.references == {str(value): None}


def test_a_secret_the_folder_quotes_is_hidden_on_the_page(run, monkeypatch):
    """A trial error or best.yaml written by another version (or edited) quoted a URL's password
    or an environment secret, and the page showed it as written."""
    monkeypatch.setenv("HF_TOKEN", "hf_<the&token>")
    _edit_journal(
        run,
        "pruned after 5 measured steps",
        "no postgresql://u:hunter22x@db.example/optuna (token hf_<the&token>)",
    )
    with open(run / "best.yaml", "a") as f:
        f.write("# stored in postgresql://u:other-pw9@db.example/optuna\n")
    write_report(run)
    page = (run / "report.html").read_text()
    assert "no postgresql://u:***@db.example/optuna (token ***)" in page
    assert "postgresql://u:***@db.example/optuna" in page.split("# stored in ")[1]
    assert "hunter22x" not in page and "other-pw9" not in page and "the&amp;token" not in page


STOCK_SPEED = '\\"samples_per_s\\":66.30351760425944'  # in trial #0's record (JSON in JSON)


@pytest.mark.parametrize("value", ["null", "NaN", '\\"fast\\"'])
def test_a_trial_record_that_cannot_be_read_costs_that_trial_only(run, value):
    """One trial's record of another shape was the whole report's error: no page for the study."""
    _edit_journal(run, STOCK_SPEED, STOCK_SPEED.split(":")[0] + ":" + value)
    write_report(run)
    report = build_report(run)
    assert any(
        n.startswith("trial #0: user_attrs.record.measurement.samples_per_s: ")
        and n.endswith("; trial #0's measurement is left out")
        for n in report.notes
    ), report.notes
    assert report.trial(0).samples_per_s is None
    assert report.trial(1).samples_per_s is not None and len(report.trials) == 6


def test_a_study_record_of_the_stages_that_is_not_json_costs_the_stages_only(run):
    """Without diagnosis.json the stages come from the study's attribute; one not JSON was the
    whole report's error."""
    (run / "diagnosis.json").unlink()
    stages = '"user_attr":{"autotune.diagnosis":"['
    _edit_journal(run, stages, stages.replace('"[', '"{{['))
    write_report(run)
    report = build_report(run)
    assert report.stages == []
    assert any(
        n.startswith(f"study {report.study_name!r}: user_attrs.autotune.diagnosis: ")
        and n.endswith("; the diagnosis stages are left out")
        for n in report.notes
    ), report.notes


@pytest.mark.timeout(120)
def test_a_parameter_name_of_100000_letters_is_written_in_reasonable_time(run):
    """Hiding the page's secrets backtracked over such a word for minutes."""
    _edit_journal(run, "data.num_workers", "x" * 100_000)
    write_report(run)
    assert "x" * 100_000 in (run / "report.html").read_text()


def test_a_parameter_name_that_reads_as_mathtext_is_drawn_as_written(run):
    _edit_journal(run, "data.num_workers", "a$\\\\frac{$b")
    write_report(run)
    page = (run / "report.html").read_text()
    assert "<code>a$\\frac{$b=" in page


def _set(run: Path, name: str, edit) -> None:
    data = json.loads((run / name).read_text())
    edit(data)
    (run / name).write_text(json.dumps(data))


@pytest.mark.parametrize(
    "name, edit, note",
    [
        (
            "parity.json",
            lambda d: d.update(tolerance="big"),
            "parity.json: tolerance is 'big', not float | None; left out",
        ),
        (
            "parity.json",
            lambda d: d.update(passed="yes"),
            "parity.json: passed is 'yes', not bool; left out",
        ),
        (
            "diagnosis.json",
            lambda d: d["stages"][0].update(share="big"),
            "diagnosis.json: stage: share is 'big', not float | None; left out",
        ),
        (
            "diagnosis.json",
            lambda d: d["stages"][0].update(groups=[5]),
            "diagnosis.json: stage: groups is [5], not list[str] | None; left out",
        ),
        (
            "diagnosis.json",
            lambda d: d.update(stages=5),
            "diagnosis.json: stages is 5, not a list of stages; left out",
        ),
        (
            "diagnosis.json",
            lambda d: d.update(stages={"stage": 1}),
            "diagnosis.json: stages is {'stage': 1}, not a list of stages; left out",
        ),
    ],
)
def test_a_summary_field_of_another_type_is_left_out_with_a_note(run, name, edit, note):
    _set(run, name, edit)
    report = build_report(run)
    assert note in report.notes
    write_report(run)
    assert (run / "report.html").is_file()


SUMMARY = "profiles/trial-0001/classification.summary"


@pytest.mark.parametrize(
    "edit, note",
    [
        (
            lambda c: c.update(step_time_ms="slow"),
            f"{SUMMARY}: step_time_ms is 'slow', not float | None; left out",
        ),
        (
            lambda c: c.update(buckets=[1, 2]),
            f"{SUMMARY}: buckets is [1, 2], not dict[str, float] | None; left out",
        ),
        (
            lambda c: c["ranks"][0].update(buckets={"compute_serial": "x"}),
            f"{SUMMARY} has an unexpected shape; its buckets are left out",
        ),
        (
            lambda c: c.update(top_kernels="x"),
            f"{SUMMARY} has an unexpected shape; its buckets are left out",
        ),
    ],
)
def test_a_profile_summary_of_another_shape_costs_its_part_only(run, edit, note):
    _set(run, SUMMARY, lambda d: edit(d["classification"]))
    report = build_report(run)
    assert note in report.notes
    write_report(run)
    assert (run / "report.html").is_file()


def _set_provenance(run: Path, edit) -> None:
    data = yaml.safe_load((run / "best.yaml").read_text())
    edit(data["provenance"])
    (run / "best.yaml").write_text(yaml.safe_dump(data))


CONFIRMATION_LEFT_OUT = (
    "best.yaml: its confirmation is not of the shape autotune writes ({what}); left out: the study's "
    "own numbers are shown"
)


@pytest.mark.parametrize(
    "edit, what",
    [
        (lambda p: p["confirmation"].update(speedup="fast"), "speedup 'fast'"),
        (lambda p: p["confirmation"].update(samples_per_s=[1]), "samples_per_s [1]"),
        (lambda p: p["confirmation"].update(rounds="2"), "rounds '2'"),
        (lambda p: p["confirmation"].update(spread=5), "spread 5"),
        (lambda p: p["confirmation"].update(trial=99), "trial 99"),
        (lambda p: p.update(confirmation="yes"), "'yes'"),
    ],
)
def test_a_confirmation_of_another_shape_is_left_out_with_a_note(run, edit, what):
    """best.yaml's confirmation with a number turned to text (or a winner the study has not): the page
    formatted it and the report ended in a traceback."""
    _set_provenance(run, edit)
    report = build_report(run)
    assert CONFIRMATION_LEFT_OUT.format(what=what) in report.notes, report.notes
    assert (
        report.summary.confirmation is None
        and report.summary.speedup == report.summary.study_speedup
    )
    write_report(run)
    assert (run / "report.html").is_file()


def test_a_step_time_of_another_type_leaves_the_fine_tuning_time_out(run):
    _set_provenance(run, lambda p: p.update(step_time_ms="fast"))
    report = build_report(run)
    assert "at the study's" not in report.finetune.hint
    write_report(run)
    assert (run / "report.html").is_file()


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize(
    ("name", "edit", "note"),
    [
        ("best.yaml", lambda p: p.write_bytes(b"\xe7" * 3000), "best.yaml is not UTF-8 text (byte 0); left out"),
        ("best.yaml", lambda p: p.write_text("a: " + "[" * 20000 + "]" * 20000),
         "best.yaml's provenance could not be read (best.yaml: nests lists or mappings deeper than can be read"),
        ("best.yaml", lambda p: p.write_text(LAUGHS),
         "best.yaml's provenance could not be read (best.yaml: its aliases (*name) expand to more than 100000"),
        ("best.yaml", _fifo, "best.yaml could not be read ({path}: not a regular file (a device, pipe or socket)"),
        ("run.json", _fifo, "run.json could not be read ({path}: not a regular file (a device, pipe or socket)"),
    ],
    ids=["binary", "deep", "alias-bomb", "fifo-best", "fifo-run-json"],
)  # fmt: skip
def test_a_best_yaml_or_run_json_that_cannot_be_read_costs_its_part_only(run, name, edit, note):
    """A binary or deep best.yaml was a traceback; a pipe there was taken for no file, unnoted."""
    edit(run / name)
    report = build_report(run)
    note = note.format(path=run / name)
    assert any(n.startswith(note) for n in report.notes), report.notes


def test_a_journal_that_is_a_pipe_is_named_as_one(run, capsys):
    from autotune.cli import main

    _fifo(run / JOURNAL)
    assert main(["report", str(run)]) == 2
    assert capsys.readouterr().err == (
        f"autotune: error: {run / JOURNAL}: not a regular file (a device, pipe or socket); expected a file\n"
    )


def test_a_journal_cut_short_behind_its_diagnosis_is_a_page(run):
    """The diagnosis names trials a journal cut short (a full disk, a copy taken mid-write) no longer
    holds, stock's among them: the page says so where it lists them, and is written."""
    lines = (run / JOURNAL).read_text().splitlines(keepends=True)
    first_trial = next(i for i, line in enumerate(lines) if '"op_code":4,' in line)
    (run / JOURNAL).write_text("".join(lines[:first_trial]))
    _set(run, "diagnosis.json", lambda d: d["stages"][0].update(best_trial=None, trials=[999]))
    write_report(run)
    page = (run / "report.html").read_text()
    assert "#999 not in the study" in page
    assert build_report(run).trial(999) is None


def test_a_profile_path_never_links_to_another_site(run):
    """A stage's profile of "//host/path" was linked as is: a protocol-relative link, to another site."""
    _set(run, "diagnosis.json", lambda d: d["stages"][0].update(profile="//evil.example/x"))
    write_report(run)
    page = (run / "report.html").read_text()
    assert 'href="/evil.example/x"' in page and 'href="//' not in page


def test_links_out_of_the_run_folder_list_nothing_of_that_folder(run, tmp_path):
    """A profiles/trial-N linked to a folder elsewhere listed that folder's files on the page as the
    trial's traces (the names in a home or /etc of the machine making the report)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "private-notes.txt").write_text("x")
    (run / "profiles" / "trial-0099").symlink_to(elsewhere)
    (run / "profiles" / "trial-0000" / "rank1.trace.json").symlink_to(
        elsewhere / "private-notes.txt"
    )
    (run / "profiles" / "trial-0000" / "rank0.trace.json").write_text("{}")
    (run / "profiles" / "trial-0000" / "rank2.trace.json").symlink_to("rank0.trace.json")
    report = build_report(run)
    assert "profiles/trial-0099 is a link out of the run folder; left out" in report.notes
    assert "profiles/trial-0000/rank1.trace.json is a link out of the run folder; left out" in (
        report.notes
    )
    assert all(p.trial != 99 for p in report.profiles)
    assert "profiles/trial-0000/rank2.trace.json" in report.stock_profile.traces  # inside: kept
    write_report(run)
    assert "private-notes" not in (run / "report.html").read_text()
