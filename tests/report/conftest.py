"""The report tests' browser; their run folders (``quick_run``, ``failed_run``) are shared by the whole
session (``tests/studies.py``)."""

from __future__ import annotations

import importlib.util
import os

import pytest

from tests.studies import CRASHY, CRASHY_STUDY, QUICK, QUICK_DIR, REFERENCE, journal  # noqa: F401

from .browser import CHROMIUM


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """Debian's chromium (.ci/run installs it); in CI a missing browser fails rather than skips."""
    missing = (
        "chromium is not installed (apt-get install -y chromium)" if CHROMIUM is None else None
    )
    if importlib.util.find_spec("websocket") is None:
        missing = "websocket-client is not installed (pip install -e '.[test]')"
    if missing:
        pytest.fail(missing) if os.environ.get("CI") else pytest.skip(missing)
    return CHROMIUM
