"""A job's ``--output-dir`` holds one job's files: a folder of another program's under the names a
job writes is refused before anything there is touched.

A job deletes ``checkpoint-<step>`` folders (``--save-total-limit``), rewrites ``metrics.jsonl`` to
the step it resumes from, and purges ``tensorboard/`` past that step: run on a Hugging Face
Trainer's output folder (its ``checkpoint-500/``, ``runs/``) or beside another tool's
``metrics.jsonl``, it would delete or rewrite them. The folder is a job's when one of its
checkpoints has a job's ``trainer_state.json`` (a mapping with ``step`` and ``files``), or when its
``metrics.jsonl`` is empty or starts with a job's line (``time``, ``step``, and ``loss`` or
``event``); a job killed before its first log line leaves an empty one. A folder inside another
job's ``checkpoint-<step>`` is refused too: that job deletes it with the checkpoint. So is a link
under a checkpoint's name or as ``tensorboard/`` or ``profiles/``: the job would write through it
(a link as ``metrics.jsonl`` is replaced by the job's own file).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from autotune.boundedread import METADATA_BYTES, check_regular, read_bytes
from autotune.errors import AutotuneError, ConfigError
from autotune.train.job.checkpoint import STATE, check_outside, checkpoints, step_of

METRICS = "metrics.jsonl"
FOLDERS = ("tensorboard", "profiles")
"""The folders a job writes into under fixed names."""
WRITTEN = (METRICS, *FOLDERS)
"""What a job writes into its folder under fixed names, besides its checkpoints."""


def check_job_folder(out: Path) -> None:
    """Raise :class:`ConfigError` when ``out`` holds files under a job's names that no job wrote, or
    lies inside another job's checkpoint."""
    check_outside(out, "--output-dir")
    _check_log(out, out / METRICS)
    _check_links(out)
    found = [p.name for _, p in checkpoints(out)] + [n for n in WRITTEN if _holds(out / n)]
    if not found or is_job_folder(out):
        return
    shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    raise ConfigError(
        f"--output-dir {out}: holds {shown} of no autotune job (no checkpoint's {STATE} nor "
        f"{METRICS} is a job's), which the job would delete or overwrite: give another "
        "--output-dir (a new or empty folder)"
    )


def _check_log(out: Path, log: Path) -> None:
    """The job reads its log to its end and appends to it: a FIFO or a device there (or at the end
    of a link there) would never end, and SIGTERM only asks a job to save at its next step."""
    try:
        check_regular(log)
    except (FileNotFoundError, NotADirectoryError):  # none yet, or a dangling link (replaced)
        return
    except AutotuneError:
        if log.is_dir():
            raise ConfigError(
                f"--output-dir {out}: {log} is a folder, not a job's log; remove it or give another "
                "--output-dir"
            ) from None
        raise ConfigError(
            f"--output-dir {out}: {log} is a device, pipe or socket, not a job's log; remove it or "
            "give another --output-dir"
        ) from None
    except OSError:  # a link loop, no permission: the job's own read names it
        return


def _check_links(out: Path) -> None:
    """A link under a checkpoint's name or a folder's the job writes (``metrics.jsonl``'s is
    replaced): the job would write its files through it into the folder it leads to, or fail to
    replace it only once it had trained to that checkpoint's step."""
    if not out.is_dir():
        return
    for p in sorted(out.iterdir()):
        if p.is_symlink() and (step_of(p) is not None or p.name in FOLDERS):
            raise ConfigError(
                f"--output-dir {out}: {p} is a symbolic link (to {os.readlink(p)}), which the job "
                "would write through or fail to replace; remove it, or give another --output-dir"
            )


def removable_as_a_jobs(folder: Path) -> bool:
    """``folder`` may be removed to start a job afresh: nothing is there, an empty folder, or a
    folder a job wrote (never a folder of the user's that happens to bear the name)."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        return False
    return not folder.exists() or not any(folder.iterdir()) or is_job_folder(folder)


def _holds(path: Path) -> bool:
    """``path`` is a file, or a folder with something in it (an empty one loses nothing)."""
    if path.is_dir() and not path.is_symlink():
        return any(path.iterdir())
    return path.exists() or path.is_symlink()


def is_job_folder(out: Path) -> bool:
    """``out`` is a job's folder: its log or one of its checkpoints' states is a job's."""
    return _jobs_metrics(out / METRICS) or any(_jobs_state(p / STATE) for _, p in checkpoints(out))


def _jobs_state(path: Path) -> bool:
    try:
        state = json.loads(read_bytes(path, METADATA_BYTES))
    except (AutotuneError, OSError, ValueError, RecursionError):  # nested past Python's stack
        return False
    return isinstance(state, dict) and "step" in state and isinstance(state.get("files"), dict)


def _jobs_metrics(path: Path) -> bool:
    try:
        check_regular(path)  # never a device or a pipe, whose read would not end
        with open(path, "rb") as f:
            first = f.readline(1 << 16)
    except (AutotuneError, OSError):
        return False
    if not first.strip():
        return True
    try:
        line = json.loads(first)
    except (ValueError, RecursionError):
        return False
    return (
        isinstance(line, dict)
        and isinstance(line.get("time"), (int, float))
        and isinstance(line.get("step"), int)
        and ("loss" in line or "event" in line)
    )
