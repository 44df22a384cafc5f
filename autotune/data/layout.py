"""Where each episode lives on disk, whatever the codebase version: its rows of a parquet file and
its frames of one mp4 per view (v2: files of its own; v3.0: ranges of files shared by many)."""

from __future__ import annotations

import os
import re
import string
from dataclasses import dataclass, field
from pathlib import Path

from autotune.data.files import get
from autotune.errors import DataError

PATH_MAX = 4096
"""The longest path Linux opens: a template padded past it names no file."""
_NUMBER = re.compile(r"\d+")

INFO, STATS, MODALITY, TOKENIZER = (
    "meta/info.json",
    "meta/stats.json",
    "meta/modality.json",
    "meta/tokenizer.json",
)


@dataclass(frozen=True)
class VideoSpan:
    """An episode's frames in a video file: frames ``first_frame .. first_frame + length - 1``."""

    path: Path
    first_frame: int


@dataclass(frozen=True)
class Episode:
    index: int
    length: int
    tasks: tuple[str, ...]
    data_file: Path
    first_row: int
    """Row of ``data_file`` where the episode starts (0 in v2, where the file is the episode's)."""
    videos: dict[str, VideoSpan] = field(default_factory=dict)
    """Video key -> where its frames are."""


@dataclass(frozen=True)
class Index:
    """What a version's reader finds: the episodes in order, the tasks, and the files it read."""

    episodes: list[Episode]
    tasks: dict[int, str]
    files: tuple[Path, ...]
    """The episode index files (for messages)."""


def path_template(info: dict, key: str, placeholders: tuple[str, ...], path: Path) -> str:
    """info.json's ``key`` (``data_path``, ``video_path``), whose placeholders must be known."""
    template = get(info, key, path, str)
    try:
        fields = [(name, spec) for _, name, spec, _ in string.Formatter().parse(template)]
    except ValueError as exc:
        raise DataError(f"{path}: {key} {template!r} is not a path template ({exc})") from None
    names = {name for name, _ in fields if name is not None}
    # {episode_index:0999999999d} formats to a gigabyte for every episode: refused before formatting
    if any(_too_wide(spec or "") for _, spec in fields):
        raise DataError(
            f"{path}: {key} {template!r} pads a placeholder past {PATH_MAX} characters; allowed: "
            f"a width of at most {PATH_MAX} (the longest path a file may have)"
        )
    unknown = sorted(names - set(placeholders))
    if unknown:
        raise DataError(
            f"{path}: {key} {template!r} has placeholder {unknown[0]!r}; this codebase version allows {list(placeholders)}"
        )
    try:  # the format specs too: {episode_index:06q} parses, and fails only when an episode is read
        template.format(**{name: "key" if name == "video_key" else 0 for name in placeholders})
    except (ValueError, IndexError, KeyError) as exc:
        raise DataError(f"{path}: {key} {template!r} is not a path template ({exc})") from None
    return template


def _too_wide(spec: str) -> bool:
    """A format spec holds a number (width or precision) greater than ``PATH_MAX``."""
    return any(len(n.lstrip("0")) > 4 or int(n) > PATH_MAX for n in _NUMBER.findall(spec))


def inside(root: Path, relative: str, key: str, info_path: Path) -> Path:
    """``root / relative``, a path info.json's template ``key`` gave: the template and the video keys
    in it are data, so the path must stay in the dataset folder (no absolute path, no ``..`` out)."""
    norm = os.path.normpath(relative)
    if os.path.isabs(norm) or norm == os.pardir or norm.startswith(os.pardir + os.sep):
        raise DataError(
            f"{info_path}: {key} gives {relative!r}, outside the dataset folder; allowed: a path "
            "inside it, relative to it"
        )
    return root / relative
