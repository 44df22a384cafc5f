"""The HTML page of a report: one self-contained file (figures inline, no script, no external resource).

    python -m autotune report RUN_DIR            # writes RUN_DIR/report.html
    from autotune.report import write_report     # what ``autotune run`` calls when it ends

The page comes from ``templates/report.html.j2`` (Jinja2, autoescaped); links to the trace and log
files are relative to the page, so the run folder can be moved or copied as a whole.
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
import optuna

from autotune.config.io import write_output
from autotune.errors import ReportError
from autotune.profiling.result import BUCKETS
from autotune.redact import StorageURL, environment_secrets, hide_secrets
from autotune.report import folder
from autotune.report.model import Report, load_report

REPORT = "report.html"
_PNG = re.compile(r"data:image/png;base64,[A-Za-z0-9+/=]*")


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("autotune.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(num=_num, gib=_gib, pct=_pct, duration=_duration, times=_times)
    return env


def render_html(report: Report, study: optuna.Study, link_base: str = ".") -> str:
    """The page; links relative to the run folder are prefixed with ``link_base`` (the run folder seen from the page)."""
    from autotune.report.plots import figures

    def link(path: str) -> str:  # an href: quoted, so that a folder named "a #1" still links
        if Path(path).is_absolute():
            # one leading slash: "//host/x" (a folder's diagnosis may say so) is another site's page
            path = "/" + path.lstrip("/")
        elif link_base not in ("", "."):
            path = f"{link_base.rstrip('/')}/{path}"
        return quote(path)

    template = environment().get_template("report.html.j2")
    page = template.render(
        r=report,
        s=report.summary,
        figures=figures(report, study),
        link=link,
        buckets=BUCKETS,
        run_info=asdict(report.run),
    )
    return without_secrets(page)


def without_secrets(page: str) -> str:
    """``page`` with every URL's password and the values of this environment's secret variables
    hidden: a run folder is data someone handed over, written by another version or edited, and
    its trial errors, stages or best.yaml may quote a secret the page must not. The inline figures
    are left as they are (a secret's letters inside base64 are no secret, and replacing them would
    break the image)."""
    secrets = environment_secrets()
    # the page holds a secret with <, > or & HTML-escaped
    secrets = sorted({*secrets, *map(html.escape, secrets)}, key=len, reverse=True)
    parts, last = [], 0
    for image in _PNG.finditer(page):
        parts += [hide_secrets(page[last : image.start()], secrets), image.group()]
        last = image.end()
    return "".join(parts) + hide_secrets(page[last:], secrets)


def write_report(
    run_dir: str | os.PathLike,
    out: str | os.PathLike | None = None,
    study_name: str | None = None,
    storage: str | StorageURL | None = None,
) -> Path:
    """Build the report of ``run_dir`` and write it (atomically) to ``out``, default ``RUN_DIR/report.html``.

    ``study_name`` overrides run.json's; ``storage`` is the study's database, given by the caller
    (see :func:`build_report`).
    """
    run_dir = folder.check_folder(run_dir)
    path = Path(out) if out else run_dir / REPORT
    if out:
        _check_page(path)
    report, study = load_report(run_dir, study_name, storage)
    base = os.path.relpath(run_dir.resolve(), path.resolve().parent)
    write_output(path, render_html(report, study, base), "--out" if out else "the report")
    return path


def _check_page(path: Path) -> None:
    """``--out`` may replace a page, never another file: a tab-completed ``RUN_DIR/study.journal``
    or ``best.yaml`` was overwritten with the page, and the study lost."""
    if not os.path.isfile(path):  # nothing there, or a folder, pipe or device: refused when written
        return
    try:
        with open(path, "rb") as f:
            head = f.read(256).lstrip().lower()
    except OSError:  # unreadable: writing it will say why
        return
    if head and not head.startswith((b"<!doctype html", b"<html")):  # an empty file holds nothing
        raise ReportError(
            f"--out {path}: exists and is not an HTML page; a report replaces a page, never another "
            "file (give a new file)"
        )


def _num(x: Any, digits: int = 2) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def _gib(x: Any) -> str:
    return "–" if x is None else f"{x / 2**30:,.2f} GiB"


def _pct(x: Any, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f} %"


def _times(x: Any) -> str:
    return "–" if x is None else f"{x:.2f}\u00d7"


def _duration(seconds: Any) -> str:
    if seconds is None:
        return "–"
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
