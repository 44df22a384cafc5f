"""Reading a run folder at the edge: the study, and the files ``autotune run`` writes beside it.

Only the study is required. Every other file is optional, because a study that is still running
(or was interrupted) has no ``best.yaml`` yet and an older run has no ``diagnosis.json``: a missing
file reads as ``None``, an unreadable one as ``None`` plus a note for the page.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import optuna

from autotune.boundedread import check_regular
from autotune.boundedread import read_text as read_bounded
from autotune.errors import AutotuneError, ReportError
from autotune.redact import StorageURL, is_redacted, redact
from autotune.search.storage import JOURNAL, open_storage

PROFILES = "profiles"
SUMMARY = "classification.summary"
_TRIAL_DIR = re.compile(r"trial-(\d+)$")


def check_folder(run_dir: str | Path) -> Path:
    path = Path(run_dir)
    if not path.is_dir():
        raise ReportError(
            f"{path}: not a folder; give the run folder of `autotune run` (it holds {JOURNAL})"
        )
    return path


def read_json(path: Path, notes: list[str]) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when the file is absent or unreadable (then noted)."""
    if not os.path.lexists(path):  # a pipe or a folder there is unreadable, not absent
        return None
    try:
        data = json.loads(read_bounded(path, error=ReportError))
    # RecursionError: a value nested deeper than Python's stack
    except (AutotuneError, OSError, ValueError, RecursionError) as exc:
        notes.append(f"{path.name} could not be read ({exc}); left out")
        return None
    if not isinstance(data, dict):
        notes.append(f"{path.name} does not hold a JSON object; left out")
        return None
    return data


def read_text(path: Path, notes: list[str]) -> str | None:
    """The text of a file of the folder (at most a metadata file's size); None when absent or
    unreadable (then noted: a binary, huge or non-regular file costs its part of the page)."""
    if not os.path.lexists(path):
        return None
    try:
        return read_bounded(path, error=ReportError)
    except UnicodeDecodeError as exc:
        notes.append(f"{path.name} is not UTF-8 text (byte {exc.start}); left out")
    except (AutotuneError, OSError) as exc:
        notes.append(f"{path.name} could not be read ({exc}); left out")
    return None


def open_study(
    run_dir: Path,
    storage_url: StorageURL | str | None,
    study_name: str | None,
    hint: str | None = None,
    named: str | None = None,
) -> optuna.Study:
    """The run's study: ``study.journal`` in the folder, or the database ``storage_url`` names.

    ``storage_url`` comes from the user (``--storage``, ``$AUTOTUNE_STORAGE``), never from the folder:
    ``named`` is the database run.json names, which is only quoted (redacted) in the error that asks
    for it. A run folder someone hands over is data; reading it connects nowhere and creates nothing.
    Without a name, the storage must hold one study (or ``hint``, e.g. best.yaml's study, among several).
    """
    storage = _storage(run_dir, StorageURL.of(storage_url), named)
    names = optuna.get_all_study_names(storage)
    if study_name is None:
        if hint in names:
            study_name = hint
        elif len(names) == 1:
            study_name = names[0]
        elif not names:
            raise ReportError(f"{run_dir}: its storage holds no study yet")
        else:
            raise ReportError(
                f"{run_dir}: its storage holds several studies {names}; choose one with --study"
            )
    elif study_name not in names:
        raise ReportError(f"{run_dir}: no study {study_name!r} in its storage; it holds {names}")
    return optuna.load_study(study_name=study_name, storage=storage)


def _storage(
    run_dir: Path, url: StorageURL | None, named: str | None
) -> optuna.storages.BaseStorage:
    if url is None:
        if named:  # the folder's word for where its study is: quoted, never opened
            raise ReportError(
                f"{run_dir}: its run.json says the study is in the database {redact(named)}; a run "
                "folder never chooses a database to connect to: give the URL yourself "
                "(autotune report RUN_DIR --storage URL, or $AUTOTUNE_STORAGE)"
            )
        journal = run_dir / JOURNAL
        if not os.path.lexists(journal):
            raise ReportError(
                f"{run_dir}: no study in it (no {JOURNAL}); give the run folder of `autotune run`"
            )
        check_regular(journal, ReportError)  # a pipe would block the reader for ever
    elif is_redacted(url.secret()):  # run.json's URL, copied with its secrets hidden
        raise ReportError(
            f"{run_dir}: {url.source} {url} has its password hidden (***); give the URL with the password "
            f"(autotune report RUN_DIR --storage URL, or $AUTOTUNE_STORAGE)"
        )
    elif (missing := _missing_sqlite_file(url.secret())) is not None:
        raise ReportError(
            f"{url.source} {url}: no database file {missing}; give the file the study is kept in "
            "(a report creates no database)"
        )
    return open_storage(url, run_dir)


def _missing_sqlite_file(url: str) -> str | None:
    """The file an SQLite URL names, where there is none: opening it would create an empty database
    (a mistyped path) for the report to find no study in."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # not a URL: open_storage says so, in its words
        return None
    db = parsed.database
    if parsed.get_backend_name() != "sqlite" or db in (None, "", ":memory:"):
        return None
    return None if os.path.lexists(db) else db


def profile_dirs(run_dir: Path, notes: list[str]) -> list[Path]:
    """The profiling folders of the run (``profiles/trial-NNNN``), in trial order; a link out of the
    run folder is left out (noted): the page would list the files of a folder elsewhere on this machine."""
    root = run_dir / PROFILES
    if not root.is_dir() or not inside(root, run_dir, notes):
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and inside(p, run_dir, notes))


def trial_of(profile_dir: Path) -> int | None:
    match = _TRIAL_DIR.search(profile_dir.name)
    return int(match.group(1)) if match else None


def trace_files(profile_dir: Path, run_dir: Path, notes: list[str]) -> list[Path]:
    """The trace files of a profiling folder (every file but the classification summary; a link out
    of the run folder is left out, noted)."""
    return sorted(
        p
        for p in profile_dir.iterdir()
        if p.is_file()
        and p.name != SUMMARY
        and not p.name.startswith(".")
        and inside(p, run_dir, notes)
    )


def inside(path: Path, run_dir: Path, notes: list[str]) -> bool:
    """Whether ``path`` (a link included) leads to a place inside the run folder; if not, noted."""
    if not path.is_symlink() or path.resolve().is_relative_to(run_dir.resolve()):
        return True
    notes.append(
        f"{path.relative_to(run_dir).as_posix()} is a link out of the run folder; left out"
    )
    return False
