"""The dataset made once per machine when ``data.dataset`` is null.

It lives in ``$AUTOTUNE_CACHE/datasets/<name>`` (``~/.cache/autotune/datasets/<name>`` when the
variable is unset). Ranks that start together take a file lock: the first one makes the dataset
(written aside, then renamed into place), the others wait and reuse it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
from collections.abc import Iterator
from multiprocessing import resource_tracker
from pathlib import Path

from autotune.childsignals import stops_held
from autotune.data.augment import short_edge_for
from autotune.data.make import MakeSpec, make_dataset
from autotune.data.meta import INFO
from autotune.data.spec import ReadSpec
from autotune.errors import DataError
from autotune.sigterm import exit_on_sigterm, stop_again

DATASET_SEED = 0
"""The content of the cached dataset does not follow the training seed: every trial shares it."""


CACHE_ENV = "AUTOTUNE_CACHE"


def cache_root() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "autotune"


def cache_folder(*parts: str) -> Path:
    """``cache_root() / parts``, made if needed; one that cannot be made (``$AUTOTUNE_CACHE`` names a
    file, ``/dev/null``, a read-only place) is one line naming the variable."""
    path = cache_root().joinpath(*parts)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        where = f"${CACHE_ENV}" if os.environ.get(CACHE_ENV) else "the cache"
        raise DataError(
            f"{where} {cache_root()}: cannot make {path} ({exc.strerror}); set {CACHE_ENV} to a "
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
    try:
        with _locked(folder / f".{name}.lock"):
            if not (path / INFO).is_file():
                _make_in_fresh_process(path, spec)
    except OSError as exc:  # the error of a file deep in the half-made copy says less than this
        raise DataError(
            f"the dataset cache {folder}: cannot make {name} there ({exc.strerror or exc}); set "
            f"{CACHE_ENV} to a folder you can write that has room for it, or give --dataset DIR"
        ) from None
    return path


def _make_in_fresh_process(path: Path, spec: MakeSpec) -> None:
    """Encode in a spawned process: the encoder's threads must never exist in a process that
    later forks DataLoader workers (a fork while they hold a lock deadlocks the workers; seen as a
    hung first trial on the 16-core GPU machine).

    The child shares the terminal's process group, so a Ctrl-C there reaches it too: it starts with
    SIGINT blocked (a KeyboardInterrupt in its start-up would print a traceback under the command's
    one line), and this process, stopped by Ctrl-C, SIGTERM or SIGHUP, stops it with SIGTERM, which
    it leaves through ``make_dataset``'s removal of its half-made folder."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_make_in_child, args=(path, spec, send), name="autotune-dataset")
    try:
        _start(child)
        send.close()
        error = receive.recv()
    except EOFError:  # it died without a word: killed (the OOM killer), or its interpreter failed
        error = None if (path / INFO).is_file() else _died(path, child)
    except BaseException:
        if child.pid is not None:
            child.terminate()
        raise
    finally:
        if child.pid is not None:
            child.join()
        send.close()
        receive.close()
    if error is not None:
        raise error


def _start(child) -> None:
    """Start the child with SIGTERM and SIGINT held (:func:`stops_held`): a stop raised in the
    middle of the start would leave it running, out of reach of the ``except`` that stops it."""
    with stops_held():
        # a spawn starts the resource tracker first if it is not running, and that start
        # unblocks SIGINT on its way out: started here, the mask below holds until the child's exec
        resource_tracker.ensure_running()
        with _sigint_blocked():  # the blocked mask is inherited through fork and exec
            child.start()


def _make_in_child(path: Path, spec: MakeSpec, send) -> None:
    # SIGTERM and SIGHUP raise Terminated (a SystemExit: the child ends with 128 + the signal and
    # no word), where it can propagate: not in an import or a __del__ (autotune.sigterm)
    exit_on_sigterm()
    sys.unraisablehook = stop_again(sys.unraisablehook)
    try:
        make_dataset(path, spec)
    except Exception as exc:  # noqa: BLE001  raised again in the parent
        try:
            send.send(exc)
        except Exception:  # noqa: BLE001  an error that does not pickle: its words
            send.send(DataError(f"{type(exc).__name__}: {exc}"))
    else:
        send.send(None)


def _died(path: Path, child) -> DataError:
    child.join()
    return DataError(
        f"{path}: the process making the dataset ended (exit code {child.exitcode}) before it was "
        "made; run the command again"
    )


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no process groups to share a Ctrl-C
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:  # a Ctrl-C that came meanwhile is delivered here, now
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


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
