"""Open a page in a real headless Chromium (Debian's ``chromium``) over the DevTools protocol.

:func:`open_page` loads a file, waits for its load event, and returns what the tests check: the
console errors and uncaught exceptions (failed resource loads included), every ``<img>`` with its
decoded size, the page's external resources, and a full-page PNG screenshot. :func:`follow` clicks
through links of a page as a reader would: what each target showed, or the file it downloaded.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)

# Every <img>: its source's first characters and whether it decoded; every resource the page loaded.
_INSPECT = """JSON.stringify({
  images: Array.from(document.images).map(i => ({src: i.src.slice(0, 40), complete: i.complete,
                                                 width: i.naturalWidth, height: i.naturalHeight})),
  resources: performance.getEntriesByType('resource').map(e => e.name),
  height: document.documentElement.scrollHeight,
})"""


@dataclass
class PageResult:
    errors: list[str] = field(default_factory=list)
    """Console errors, uncaught exceptions and failed loads, in order."""
    images: list[dict] = field(default_factory=list)
    resources: list[str] = field(default_factory=list)
    screenshot: Path | None = None


@dataclass
class Followed:
    """Where one link of a page led."""

    href: str
    """The link's URL as the browser resolved it against the page."""
    error: str | None = None
    """Chromium's error for a target it could not open (``net::ERR_FILE_NOT_FOUND``)."""
    text: str | None = None
    """The text of a target the browser showed (a log)."""
    download: Path | None = None
    """The file the browser saved for a target it downloads (a gzipped trace)."""


class _Cdp:
    """A minimal DevTools client: commands by id, events collected while waiting."""

    def __init__(self, url: str) -> None:
        import websocket  # websocket-client (the test extra)

        # no Origin header: Chromium 111 and later refuse a DevTools connection from an origin not
        # named in --remote-allow-origins, and accept one that names none
        self.ws = websocket.create_connection(url, timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, event: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == event for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {event} within {timeout} s")
            self.events.append(json.loads(self.ws.recv()))


def _errors(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        method, p = e.get("method"), e.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append(
                "console: "
                + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            )
        elif method == "Runtime.exceptionThrown":
            out.append("exception: " + p.get("exceptionDetails", {}).get("text", ""))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            out.append(f"log: {p['entry'].get('text', '')} {p['entry'].get('url', '')}".strip())
    return out


@contextlib.contextmanager
def chromium(width: int = 1280, height: int = 900):
    """A headless Chromium with its DevTools endpoint; yields the page target's websocket URL."""
    # its helpers (renderer, crashpad) can outlive the browser and still write to the profile: the
    # whole group is stopped, and a file one wrote meanwhile does not fail the test's cleanup
    with tempfile.TemporaryDirectory(prefix="chromium-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--disable-gpu",
                "--no-sandbox",
                "--no-first-run",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 30
            while not (port_file.is_file() and port_file.read_text().strip()):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("chromium did not start (no DevToolsActivePort)")
                time.sleep(0.1)
            port = int(port_file.read_text().split()[0])
            yield _page_target(port)
        finally:
            _stop_group(proc)


def _stop_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the browser, and any helper left in its group
    proc.wait()


def _page_target(port: int) -> str:
    from urllib.request import urlopen

    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(OSError):
            targets = json.load(urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5))
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
        if time.monotonic() > deadline:
            raise RuntimeError("chromium has no page target")
        time.sleep(0.1)


def open_page(path: Path, screenshot: Path | None = None, width: int = 1280) -> PageResult:
    """Load ``path`` (file://), wait for its load event; errors, images, resources and a screenshot."""
    with chromium(width) as ws_url:
        cdp = _Cdp(ws_url)
        try:
            for domain in ("Page", "Runtime", "Log"):
                cdp.call(f"{domain}.enable")
            cdp.call("Page.navigate", url=path.resolve().as_uri())
            cdp.wait_for("Page.loadEventFired")
            found = json.loads(
                cdp.call("Runtime.evaluate", expression=_INSPECT, returnByValue=True)["result"][
                    "value"
                ]
            )
            result = PageResult(
                errors=_errors(cdp.events), images=found["images"], resources=found["resources"]
            )
            if screenshot is not None:
                shot = cdp.call(
                    "Page.captureScreenshot",
                    format="png",
                    captureBeyondViewport=True,
                    clip={
                        "x": 0,
                        "y": 0,
                        "width": width,
                        "height": min(found["height"], 16000),
                        "scale": 1,
                    },
                )
                screenshot.write_bytes(base64.b64decode(shot["data"]))
                result.screenshot = screenshot
            return result
        finally:
            cdp.ws.close()


def _first_href(cdp: _Cdp, selector: str) -> str:
    expr = f"(document.querySelector({json.dumps(selector)}) || {{}}).href || null"
    href = cdp.call("Runtime.evaluate", expression=expr, returnByValue=True)["result"].get("value")
    if href is None:
        raise LookupError(f"no link matches {selector!r}")
    return href


def _visit(cdp: _Cdp, href: str, downloads: Path) -> Followed:
    cdp.events.clear()
    nav = cdp.call("Page.navigate", url=href)
    if nav.get("isDownload"):
        name = _wait_download(cdp)
        return Followed(href, download=downloads / name)
    if nav.get("errorText"):
        return Followed(href, error=nav["errorText"])
    cdp.wait_for("Page.loadEventFired")
    text = cdp.call("Runtime.evaluate", expression="document.body.innerText", returnByValue=True)[
        "result"
    ]["value"]
    return Followed(href, text=text)


def _wait_download(cdp: _Cdp, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        begun = [e["params"] for e in cdp.events if e.get("method") == "Page.downloadWillBegin"]
        done = [
            e["params"]
            for e in cdp.events
            if e.get("method") == "Page.downloadProgress"
            and e["params"].get("state") in ("completed", "canceled")
        ]
        if begun and done:
            if done[-1]["state"] != "completed":
                raise RuntimeError(f"the download of {begun[0]['url']} was canceled")
            return begun[0]["suggestedFilename"]
        if time.monotonic() > deadline:
            raise TimeoutError(f"no finished download within {timeout} s")
        cdp.events.append(json.loads(cdp.ws.recv()))


def follow(path: Path, selectors: list[str], downloads: Path) -> list[Followed]:
    """Open ``path``, then for each CSS selector follow the first link it matches, back on the page each time.

    Targets that Chromium downloads (a ``.json.gz``) are saved into ``downloads``.
    """
    downloads.mkdir(parents=True, exist_ok=True)
    page_url = path.resolve().as_uri()
    with chromium() as ws_url:
        cdp = _Cdp(ws_url)
        try:
            for domain in ("Page", "Runtime"):
                cdp.call(f"{domain}.enable")
            cdp.call(
                "Page.setDownloadBehavior", behavior="allow", downloadPath=str(downloads.resolve())
            )
            found = []
            for selector in selectors:
                cdp.events.clear()
                cdp.call("Page.navigate", url=page_url)
                cdp.wait_for("Page.loadEventFired")
                found.append(_visit(cdp, _first_href(cdp, selector), downloads))
            return found
        finally:
            cdp.ws.close()
