"""The dataset made once per machine when ``data.dataset`` is null.

It lives in ``$AUTOTUNE_CACHE/datasets/<name>`` (``~/.cache/autotune/datasets/<name>`` when the
variable is unset). Ranks that start together take a file lock: the first one makes the dataset
(written aside, then renamed into place), the others wait and reuse it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path

from autotune.data.augment import short_edge_for
from autotune.data.make import MakeSpec, make_dataset
from autotune.data.meta import INFO
from autotune.data.spec import ReadSpec
from autotune.errors import DataError

DATASET_SEED = 0
"""The content of the cached dataset does not follow the training seed: every trial shares it."""


def cache_root() -> Path:
    env = os.environ.get("AUTOTUNE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "autotune"


def cache_folder(*parts: str) -> Path:
    """``cache_root() / parts``, made if needed; one that cannot be made (``$AUTOTUNE_CACHE`` names a
    file, ``/dev/null``, a read-only place) is one line naming the variable."""
    path = cache_root().joinpath(*parts)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        where = "$AUTOTUNE_CACHE" if os.environ.get("AUTOTUNE_CACHE") else "the cache"
        raise DataError(
            f"{where} {cache_root()}: cannot make {path} ({exc.strerror}); set AUTOTUNE_CACHE to a "
            "folder you can write"
        ) from None
    return path


def spec_for(read: ReadSpec, episodes: int) -> MakeSpec:
    """The dataset ``read`` takes: its views, with 256 px videos for real image sizes and 64 px
    for the toy ones (as the augmentation expects)."""
    return MakeSpec(
        episodes=episodes,
        views=read.views,
        size=short_edge_for(read.image_size),
        seed=DATASET_SEED,
    )


def cache_path(spec: MakeSpec) -> Path:
    """Where ``spec``'s dataset lives in the cache (made or not)."""
    name = (f"lerobot-{spec.format}-{spec.codec}-{spec.embodiment}-e{spec.episodes}-v{spec.views}-"
            f"s{spec.size}{f'x{spec.width}' if spec.width else ''}{f'-f{spec.frames}' if spec.frames else ''}-seed{spec.seed}")  # fmt: skip
    return cache_root() / "datasets" / name


def cached_dataset(spec: MakeSpec) -> Path:
    """The folder of ``spec``'s dataset in the cache, made first if it is not there."""
    path = cache_path(spec)
    folder, name = path.parent, path.name
    if (path / INFO).is_file():
        return path
    cache_folder("datasets")
    with _locked(folder / f".{name}.lock"):
        if not (path / INFO).is_file():
            _make_in_fresh_process(path, spec)
    return path


def _make_in_fresh_process(path: Path, spec: MakeSpec) -> None:
    """Encode in a spawned process: the encoder's threads must never exist in a process that
    later forks DataLoader workers (a fork while they hold a lock deadlocks the workers; seen as a
    hung first trial on the 16-core GPU machine)."""
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        pool.submit(make_dataset, path, spec).result()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # no flock (Windows): the atomic rename alone keeps the dataset whole
        yield
        return
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
