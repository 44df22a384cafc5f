"""``autotune data make`` and ``autotune data check``.

python -m autotune data make /tmp/ds --episodes 8 --views 2 --size 256 --seed 0
python -m autotune data check /tmp/ds
"""

from __future__ import annotations

import argparse
from pathlib import Path

from autotune.data.check import check_dataset, render_summary
from autotune.data.content import EMBODIMENTS
from autotune.data.make import MakeSpec, make_dataset
from autotune.errors import DataError


def register(subparsers) -> None:
    parser = subparsers.add_parser("data", help="make or check a LeRobot-format dataset")
    sub = parser.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)

    make = sub.add_parser(
        "make", help="write a synthetic LeRobot v2 dataset (parquet + H.264 mp4 + meta)"
    )
    make.add_argument("dir", help="folder to create")
    make.add_argument("--episodes", type=int, required=True, help="number of episodes")
    make.add_argument("--views", type=int, default=2, help="camera views per episode (default 2)")
    make.add_argument(
        "--size", type=int, default=256, help="frame height and width in pixels (default 256)"
    )
    make.add_argument("--seed", type=int, default=0, help="seed of the content (default 0)")
    make.add_argument(
        "--frames", type=int, default=None, help="frames per episode (default: 60 to 150, seeded)"
    )
    make.add_argument("--fps", type=int, default=20, help="frames per second (default 20)")
    make.add_argument(
        "--embodiment", choices=list(EMBODIMENTS), default="panda", help="state/action layout"
    )
    make.add_argument(
        "--embodiment-id", type=int, default=None, help="projector slot (default: the embodiment's)"
    )
    make.add_argument("--force", action="store_true", help="replace DIR if it exists")
    make.set_defaults(func=_make)

    check = sub.add_parser(
        "check", help="validate a dataset: meta files, parquet columns, every video"
    )
    check.add_argument("dir", help="dataset folder")
    check.set_defaults(func=_check)


def _check_target(path: Path) -> None:
    """DIR must be a folder to create (or, with --force, a folder to replace): never a file."""
    if path.exists() and not path.is_dir():
        raise DataError(f"{path}: is a file, not a folder; give a folder for the dataset (--force replaces "
                        "a dataset folder, never a file)")  # fmt: skip
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise DataError(f"{path}: {parent} is a file, not a folder; the dataset folder cannot be made inside it")


def _make(args: argparse.Namespace) -> int:
    spec = MakeSpec(
        episodes=args.episodes, views=args.views, size=args.size, seed=args.seed, frames=args.frames,
        fps=args.fps, embodiment=args.embodiment, embodiment_id=args.embodiment_id,
    )  # fmt: skip
    _check_target(Path(args.dir))
    try:
        root = make_dataset(args.dir, spec, force=args.force)
    except OSError as exc:  # a full disk, a read-only or foreign folder: the folder is left as it was
        raise DataError(f"{exc.filename or args.dir}: cannot write the dataset ({exc.strerror or exc})") from None
    print(render_summary(check_dataset(root)).replace("OK ", "made ", 1))
    return 0


def _check(args: argparse.Namespace) -> int:
    print(render_summary(check_dataset(args.dir)))
    return 0
