"""The HTML page: one self-contained file that a real headless Chromium opens without an error."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.report import build_report, write_report

from .browser import PageResult, follow, open_page

pytestmark = pytest.mark.slow


class _Refs(HTMLParser):
    """Every URL the page refers to (tag, URL), and the tags it uses."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str]] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.refs += [(tag, v) for k, v in attrs if k in ("src", "href") and v]


def refs(html: str) -> _Refs:
    parser = _Refs()
    parser.feed(html)
    return parser


def problems(page: PageResult) -> list[str]:
    """What is wrong with a page that Chromium opened: errors, undecoded images, loaded resources."""
    found = list(page.errors)
    found += [
        f"image not decoded: {i['src']}"
        for i in page.images
        if not (i["complete"] and i["width"] > 0)
    ]
    found += [f"resource loaded: {r}" for r in page.resources]
    return found


def test_page_opens_in_chromium_without_errors(quick_run, tmp_path, chromium_path):
    assert main(["report", str(quick_run)]) == 0
    page_path = quick_run / "report.html"
    page = open_page(page_path, screenshot=tmp_path / "report.png")
    assert problems(page) == []
    assert len(page.images) == 4  # time buckets, history, importances, samples/s vs memory
    html = page_path.read_text()
    assert (
        "reference <code>optimizer.impl=fused</code>" in html
        and "References measured beside the search" in html
    )
    assert (
        page.screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        and page.screenshot.stat().st_size > 50_000
    )


def test_broken_pages_are_caught(quick_run, tmp_path, chromium_path):
    """The checks above can fail: a corrupt image, a console error, a fetched resource."""
    html = write_report(quick_run, tmp_path / "good.html").read_text()
    broken = re.sub(
        r"(data:image/png;base64,)[A-Za-z0-9+/=]{40}",
        r"\1" + base64.b64encode(b"not a png").decode(),
        html,
        count=1,
    )
    broken = broken.replace(
        "</body>", "<script>console.error('boom')</script><img src='missing.png'></body>"
    )
    (tmp_path / "broken.html").write_text(broken)
    found = problems(open_page(tmp_path / "broken.html"))
    assert (
        sum(p.startswith("image not decoded") for p in found) == 2
    )  # the corrupt figure, the missing file
    assert any("boom" in p for p in found)
    assert any("missing.png" in p for p in found)


def test_page_is_self_contained_and_its_links_resolve(quick_run, tmp_path):
    """Figures inline, no script or stylesheet fetched; relative links work from another folder too."""
    out = tmp_path / "elsewhere" / "page.html"
    assert write_report(quick_run, out) == out
    html = out.read_text()
    parsed = refs(html)
    assert "script" not in parsed.tags and "link" not in parsed.tags
    for tag, url in parsed.refs:
        if tag == "img":
            assert url.startswith("data:image/png;base64,")
        elif url.startswith("https://"):
            assert (
                url == "https://ui.perfetto.dev"
            )  # a link for the reader, nothing is loaded from it
        elif not url.startswith("#"):
            assert (out.parent / url).exists(), url
    # both MFU counts, the best's and each trial's: "upstream / useful"
    report = build_report(quick_run)
    s, best = (
        report.summary,
        next(t for t in report.trials if t.number == report.summary.best_trial),
    )
    assert f"{100 * s.best_mfu:.1f} % / {100 * s.best_useful_mfu:.1f} %" in html.replace(
        "&nbsp;", " "
    )
    assert f"{100 * best.mfu:.1f} % / {100 * best.useful_mfu:.1f} %" in html.replace("&nbsp;", " ")
    logs = [url for _, url in parsed.refs if url.endswith(".log")]
    ran = [
        t for t in build_report(quick_run).trials if t.outcome != "duplicate"
    ]  # a duplicate is not run: no log
    assert len(logs) == len(ran) and all(not Path(url).is_absolute() for url in logs)


LOG, TRACE = 'a[href$=".log"]', 'a[href$=".pt.trace.json.gz"]'


def check_followed(run_dir: Path, page: Path, downloads: Path) -> None:
    """The page's first log link shows a log of the run, its first trace link downloads a trace of it, byte for byte."""
    log, trace = follow(page, [LOG, TRACE], downloads)
    assert log.error is None and trace.error is None, (log, trace)
    log_file = Path(log.href.removeprefix("file://"))
    assert (
        log_file.parent == (run_dir / "logs").resolve()
        and log.text.strip() == log_file.read_text().strip()
    )
    trace_file = Path(trace.href.removeprefix("file://"))
    assert trace_file.parent.parent == (run_dir / "profiles").resolve()
    assert trace.download.read_bytes() == trace_file.read_bytes()


def test_trace_and_log_links_of_a_relative_run_folder_open(
    quick_run, tmp_path, monkeypatch, chromium_path
):
    """A study run without --out (runs/NAME, relative): its own report and one written elsewhere both link right."""
    check_followed(quick_run, quick_run / "report.html", tmp_path / "own")
    monkeypatch.chdir(quick_run.parents[1])
    rel = quick_run.relative_to(quick_run.parents[1])
    assert main(["report", str(rel), "--out", "elsewhere/page.html"]) == 0
    check_followed(
        quick_run, quick_run.parents[1] / "elsewhere" / "page.html", tmp_path / "elsewhere"
    )


def test_a_broken_link_is_caught(tmp_path, chromium_path):
    (tmp_path / "page.html").write_text(
        '<a href="runs/x/logs/trial-0000.log">log</a>'
        '<a href="runs/x/profiles/trial-0000/rank0.pt.trace.json.gz">trace</a>'
    )
    log, trace = follow(tmp_path / "page.html", [LOG, TRACE], tmp_path / "dl")
    assert log.error == trace.error == "net::ERR_FILE_NOT_FOUND"


def test_failed_trials_show_in_the_page(failed_run):
    html = write_report(failed_run).read_text()
    rows = re.findall(r'<tr class="failed">(.*?)</tr>', html, re.S)
    assert len(rows) == 2
    assert (
        "this batch size always crashes" in rows[0]
        and "not one of this machine&#39;s choices" in rows[1]
    )
    assert ">config</b>" in rows[1]
    # a row lists the parameters that are not stock's, and all of them folded away
    changed, folded = re.search(
        r'<td class="params"><code>(.*?)<details><summary>all 2</summary>(.*?)</details>', rows[0]
    ).groups()
    assert changed == "batch_size=3</code><br>" and "precision.regions.dit=bf16" in folded
    pruned = re.search(r"<td>PRUNED</td>\s*<td>pruned.*?</tr>", html, re.S).group(0)
    assert "(last step)" in pruned and "pruned after" in pruned
    assert "4 / 1 / 2" in html  # trials run / pruned / failed


def test_report_cli_writes_into_the_run_folder(failed_run, capsys):
    target = Path(failed_run) / "report.html"
    target.unlink(missing_ok=True)
    assert main(["report", str(failed_run)]) == 0
    assert capsys.readouterr().out.strip() == f"report: {target}"
    assert target.read_text().startswith("<!DOCTYPE html>")
