"""``python -m autotune report RUN_DIR [--out FILE]``: the HTML report of a run folder.

    python -m autotune report runs/gr00t_n16-full-gr00t_n16             # -> RUN_DIR/report.html
    python -m autotune report runs/gr00t_n16-tiny-quick --out /tmp/r.html

Works on a finished study, one still running and one that was interrupted.
"""

from __future__ import annotations

import argparse

from autotune.argtypes import PATH


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write the HTML report of a run folder (report.html)",
        description="Rebuild the self-contained HTML report of an `autotune run` folder from its "
        "study, best.yaml, diagnosis and profiles.",
    )
    p.add_argument(
        "run_dir", metavar="RUN_DIR", type=PATH, help="the run folder (autotune run --out)"
    )
    p.add_argument("--out", default=None, help="the page to write (default: RUN_DIR/report.html)")
    p.add_argument(
        "--study",
        default=None,
        help="the study's name (default: run.json's, or the storage's only study)",
    )
    p.add_argument(
        "--storage",
        default=None,
        help="the study's database URL with its password, for a study kept in a database (default: "
        "$AUTOTUNE_STORAGE, else RUN_DIR/study.journal; the database run.json names is never "
        "connected to unless given here)",
    )
    p.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    from autotune.report.render import write_report
    from autotune.search.urls import storage_url

    path = write_report(
        args.run_dir, args.out, study_name=args.study, storage=storage_url(args.storage)
    )
    print(f"report: {path}")
    return 0
