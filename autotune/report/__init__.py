"""The HTML report of a tuning run (``python -m autotune report RUN_DIR``).

* :func:`build_report` reads a run folder (the study, best.yaml, diagnosis.json, parity.json, the
  profiles) into a :class:`Report`: plain, JSON-able data.
* :func:`write_report` renders it into one self-contained page, ``RUN_DIR/report.html``.
"""

from autotune.report.model import Report, Summary, build_report, load_report
from autotune.report.parts import Kernel, Parity, Profile, RankBuckets, RunInfo, Stage, TrialRow
from autotune.report.render import REPORT, render_html, write_report

__all__ = [
    "REPORT",
    "Kernel",
    "Parity",
    "Profile",
    "RankBuckets",
    "Report",
    "RunInfo",
    "Stage",
    "Summary",
    "TrialRow",
    "build_report",
    "load_report",
    "render_html",
    "write_report",
]
