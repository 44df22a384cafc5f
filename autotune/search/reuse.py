"""A run folder holds one study: ``--out`` of another study is refused before anything is written.

The files of a run folder (``best.yaml``, ``trials.csv``, ``report.html``, ``logs/trial-NNNN``,
``profiles/``) are named by trial number, not by study, so a second study there would overwrite
the first's. The study a folder holds is the one its ``run.json`` names (and, for a journal, the
studies in ``study.journal``); the same command again is the same study, and continues it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import optuna

from autotune.errors import ConfigError
from autotune.redact import StorageURL, redact
from autotune.search.options import StudyOptions
from autotune.search.storage import JOURNAL
from autotune.train.compile_cache import FOLDER as CACHE_FOLDER

RUN_INFO = "run.json"
WRITTEN = (
    RUN_INFO,
    "best.yaml",
    "trials.csv",
    "report.html",
    "diagnosis.json",
    "parity.json",
    "confirmation.json",
    "logs",
    "profiles",
)
"""What a run writes into its folder under fixed names, overwriting what is there."""


def check_same_study(opts: StudyOptions) -> None:
    """Raise :class:`ConfigError` when ``opts.out`` holds a study other than ``opts.study_name``
    (another workload, preset, space or base; or the same name kept in another storage), or files
    under a run's names that no study of autotune's wrote."""
    if opts.storage is None:
        _check_journal_not_linked(opts.out)
    held = _held_studies(opts.out, journal=opts.storage is None)
    if not held:
        _check_no_foreign_files(opts.out)
    _check_no_linked_folders(opts.out)
    others = sorted(name for name in held if name != opts.study_name)
    if others:
        raise ConfigError(
            f"--out {opts.out}: holds the study {others[0]!r}, and this command's is {opts.study_name!r} "
            "(another workload, preset, space or --base); a run folder keeps one study, whose best.yaml, "
            "trials.csv, report and logs another would overwrite: give another --out (the first study's own "
            "command continues it)"
        )
    info = _run_info(opts.out)
    if info is None or info.get("study_name") != opts.study_name:
        return
    where = str(StorageURL.of(opts.storage)) if opts.storage else None
    kept = redact(str(info["storage"])) if info.get("storage") else None  # as an older run wrote it
    if kept != where:
        raise ConfigError(
            f"--out {opts.out}: its study {opts.study_name!r} is kept in "
            f"{kept or 'the folder (' + JOURNAL + ')'}, and this command's in "
            f"{where or 'the folder (' + JOURNAL + ')'}: give another --out, or the same --storage"
        )


def _check_no_foreign_files(out: Path) -> None:
    """A folder that holds no study but has a ``best.yaml`` (a user's own configuration), a
    ``report.html`` or a ``run.json`` of another program: the run would overwrite them."""
    found = [name for name in WRITTEN if _holds(out / name)]
    if found:
        raise ConfigError(
            f"--out {out}: holds {', '.join(found)} of no autotune study (no {RUN_INFO} names one, no "
            f"{JOURNAL} holds one), which a run would overwrite: give another --out (a new or empty folder)"
        )


LINKED = ("logs", "profiles", CACHE_FOLDER)
"""The folders a run writes its trials' files into (a log made anew under its name, a trace, the
compile cache): through a link they would land in, and replace files of, another folder."""


def _check_no_linked_folders(out: Path) -> None:
    """A folder handed over is data: a link among its folders never directs where a run writes."""
    for name in LINKED:
        path = out / name
        if path.is_symlink():
            raise ConfigError(
                f"--out {out}: its {name} is a link (to {os.readlink(path)}), and a run writes its trials' "
                f"files into that folder, replacing files of the same names there: make {path} a folder of "
                "its own, or give another --out"
            )


def _check_journal_not_linked(out: Path) -> None:
    """A run appends every trial to ``study.journal``: through a link it would write into a file
    elsewhere (another run's journal, or one it creates where the link points)."""
    path = out / JOURNAL
    if path.is_symlink():
        raise ConfigError(
            f"--out {out}: its {JOURNAL} is a link (to {os.readlink(path)}), and a run appends its trials "
            f"to that file: copy the journal into {out} in place of the link, or give another --out"
        )


def _holds(path: Path) -> bool:
    """``path`` is a file, or a folder with something in it (an empty one loses nothing)."""
    if path.is_dir() and not path.is_symlink():
        return any(path.iterdir())
    return path.exists() or path.is_symlink()


def _held_studies(out: Path, *, journal: bool) -> set[str]:
    names = set()
    info = _run_info(out)
    if info is not None and isinstance(info.get("study_name"), str):
        names.add(info["study_name"])
    if journal and (out / JOURNAL).is_file():
        from autotune.search.journal import open_journal

        names.update(optuna.get_all_study_names(open_journal(out / JOURNAL)))
    return names


def _run_info(out: Path) -> dict | None:
    path = out / RUN_INFO
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        # a run would write its own over it, as over a file that is not JSON
        if not isinstance(data, dict):
            raise ValueError(f"not a JSON object: {json.dumps(data)[:60]}")
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested past the stack
        raise ConfigError(
            f"--out {out}: its {RUN_INFO} cannot be read ({exc}); it names the study the folder holds: "
            "give another --out, or restore the file"
        ) from None
    return data
