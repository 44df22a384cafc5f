"""``autotune data make``, ``autotune data check`` and ``autotune data modality``.

python -m autotune data make /tmp/ds --episodes 8 --views 2 --size 256 --seed 0
python -m autotune data make /tmp/ds3 --episodes 8 --format v3.0 --codec av1 --no-extras
python -m autotune data check /tmp/ds
python -m autotune data modality /tmp/ds3 --write
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from autotune.argtypes import NON_NEGATIVE, PATH, POSITIVE, SEED, number
from autotune.config.io import write_output
from autotune.data.check import check_dataset, render_summary
from autotune.data.content import EMBODIMENTS
from autotune.data.encode import CODECS
from autotune.data.layout import MODALITY
from autotune.data.make import FORMATS, MakeSpec, make_dataset
from autotune.data.meta import load_meta
from autotune.errors import DataError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "data", help="check, map (modality.json) or make a LeRobot dataset (v2.0, v2.1, v3.0)"
    )
    sub = parser.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)
    _make_parser(sub)
    check = sub.add_parser(
        "check", help="validate a dataset (v2.0, v2.1, v3.0): meta files, parquet, every video"
    )
    check.add_argument("dir", metavar="DIR", type=PATH, help="dataset folder")
    check.set_defaults(func=_check)
    modality = sub.add_parser(
        "modality", help="print GR00T's meta/modality.json of a dataset (inferred if missing)"
    )
    modality.add_argument("dir", metavar="DIR", type=PATH, help="dataset folder")
    modality.add_argument("--write", action="store_true", help="write it to DIR/meta/modality.json")
    modality.add_argument(
        "--force",
        action="store_true",
        help="with --write: replace an existing file with the mapping inferred from info.json",
    )
    modality.set_defaults(func=_modality)


def _make_parser(sub) -> None:
    make = sub.add_parser("make", help="write a synthetic LeRobot dataset (parquet + mp4 + meta)")
    make.add_argument("dir", metavar="DIR", type=PATH, help="folder to create")
    make.add_argument("--episodes", type=POSITIVE, required=True, help="number of episodes")
    make.add_argument(
        "--views", type=POSITIVE, default=2, help="camera views per episode (default 2)"
    )
    make.add_argument(
        "--size",
        type=POSITIVE,
        default=256,
        help="frame height (and width) in pixels (default 256)",
    )
    make.add_argument(
        "--width", type=POSITIVE, default=None, help="frame width in pixels (default: --size)"
    )
    make.add_argument("--seed", type=SEED, default=0, help="seed of the content (default 0)")
    make.add_argument(
        "--frames",
        type=POSITIVE,
        default=None,
        help="frames per episode (default: 60 to 150, seeded)",
    )
    make.add_argument("--fps", type=POSITIVE, default=20, help="frames per second (default 20)")
    make.add_argument(
        "--embodiment", choices=list(EMBODIMENTS), default="panda", help="state/action layout"
    )
    make.add_argument(
        "--embodiment-id",
        type=NON_NEGATIVE,
        default=None,
        help="projector slot, 0 to 31 (default: the embodiment's)",
    )
    make.add_argument("--format", choices=list(FORMATS), default="v2.1",
                      help="codebase version: v2.1 (a file per episode) or v3.0 (many episodes per file)")  # fmt: skip
    make.add_argument(
        "--codec",
        choices=list(CODECS),
        default="h264",
        help="video codec (default h264; av1 as lerobot)",
    )
    make.add_argument("--file-mb", type=number(0, above=True, unit="MB"), default=None,
                      help="v3.0: size at which a data or video file is closed and the next begun (lerobot: 100/200)")  # fmt: skip
    make.add_argument("--no-extras", dest="extras", action="store_false",
                      help="write only what lerobot writes: no modality.json, tokenizer.json or embodiment")  # fmt: skip
    make.add_argument(
        "--force",
        action="store_true",
        help="replace DIR if it holds a dataset (never another folder)",
    )
    make.set_defaults(func=_make)


def _check_target(path: Path) -> None:
    """DIR must be a folder to create (or, with --force, a folder to replace): never a file."""
    if path.exists() and not path.is_dir():
        raise DataError(f"{path}: is a file, not a folder; give a folder for the dataset (--force replaces "
                        "a dataset folder, never a file)")  # fmt: skip
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise DataError(
            f"{path}: {parent} is a file, not a folder; the dataset folder cannot be made inside it"
        )


def _make(args: argparse.Namespace) -> int:
    spec = MakeSpec(
        episodes=args.episodes, views=args.views, size=args.size, seed=args.seed, frames=args.frames,
        fps=args.fps, embodiment=args.embodiment, embodiment_id=args.embodiment_id, format=args.format,
        codec=args.codec, width=args.width, extras=args.extras, file_mb=args.file_mb,
    )  # fmt: skip
    _check_target(Path(args.dir))
    try:
        root = make_dataset(args.dir, spec, force=args.force)
    # a full disk, a read-only or foreign folder: the folder is left as it was (the error's own
    # file is one of the dataset's, in a temporary folder that is gone by now)
    except OSError as exc:
        raise DataError(f"{args.dir}: cannot write the dataset ({exc.strerror or exc})") from None
    print(render_summary(check_dataset(root)).replace("OK ", "made ", 1))
    return 0


def _check(args: argparse.Namespace) -> int:
    summary = check_dataset(args.dir)
    for line in summary.notices:
        print(f"autotune: note: {line}", file=sys.stderr)
    print(render_summary(summary))
    return 0


def _modality(args: argparse.Namespace) -> int:
    replace = args.write and args.force  # the mapping inferred anew: the file there may be broken
    meta = load_meta(args.dir, modality_file=not replace)
    text = json.dumps(meta.modality.to_json(), indent=2) + "\n"
    if not args.write:
        print(text, end="")
        return 0
    path = Path(args.dir) / MODALITY
    if path.exists() and not args.force:
        raise DataError(f"{path}: exists; pass --force to replace it")
    if path.is_dir():
        raise DataError(f"{path}: is a folder; --force replaces a file, never a folder")
    write_output(path, text, "--write")  # whole or not at all; a full disk leaves no temporary file
    print(f"wrote {path}")
    return 0
