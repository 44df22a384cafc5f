"""Suite-wide set-up: how pytest-xdist shares the tests among its workers.

The README's test command runs the suite on every core (``-n auto`` in pyproject.toml). Each test
file goes to one worker as a whole (its module-scoped fixtures, e.g. a dataset or a study, are made
once), and the report's files share one worker: their session-scoped study is made once.
"""

from __future__ import annotations

import pytest

SHARED_GROUPS = {"tests/report/": "report"}
"""Folders whose files share session-scoped fixtures, kept on one worker."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        group = next((g for folder, g in SHARED_GROUPS.items() if path.startswith(folder)), path)
        item.add_marker(pytest.mark.xdist_group(group))
