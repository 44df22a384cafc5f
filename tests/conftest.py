"""Fixtures every test may take: the session's shared run folders of real tiny CPU studies."""

from tests.studies import failed_run, failed_run_printed, quick_run, quick_run_printed  # noqa: F401
