"""Storage URLs from the command line or the environment, held so that they show only redacted.

``--storage`` may come from the environment variable ``AUTOTUNE_STORAGE`` instead
(:func:`storage_url`), so that the password is not in ``ps``; libpq's own ``PGPASSWORD`` and
``~/.pgpass`` work too, with no password in the URL. The URL is held as a
:class:`autotune.redact.StorageURL`: run.json, report.html, run.lock, progress and error lines can
only ever get its redacted form (:func:`autotune.redact.redact`).
"""

from __future__ import annotations

import os

from autotune.redact import REDACTED, StorageURL, is_redacted, redact, scrub, secrets_of

__all__ = [
    "REDACTED",
    "STORAGE_ENV",
    "StorageURL",
    "is_redacted",
    "redact",
    "scrub",
    "secrets_of",
    "storage_url",
]

STORAGE_ENV = "AUTOTUNE_STORAGE"


def storage_url(given: str | None) -> StorageURL | None:
    """``--storage`` as given, else ``$AUTOTUNE_STORAGE`` (None: the run folder's journal)."""
    if given:
        return StorageURL(given)
    url = os.environ.get(STORAGE_ENV)
    # an error about it names the variable: the user gave no --storage
    return StorageURL(url, f"${STORAGE_ENV}") if url else None
