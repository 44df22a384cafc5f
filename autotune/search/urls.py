"""Storage URLs as people see them: every secret hidden, and a way to keep them off the command line.

    redact("postgresql://u:pw@h/db?password=x&sslmode=require")
    # -> "postgresql://u:***@h/db?password=***&sslmode=require"

A URL reaches run.json, report.html, progress and error lines only through :func:`redact`, and
an error message that quotes a secret goes through :func:`scrub`. ``--storage`` may come from the
environment variable ``AUTOTUNE_STORAGE`` instead (:func:`storage_url`), so that the password is
not in ``ps``; libpq's own ``PGPASSWORD`` and ``~/.pgpass`` work too, with no password in the URL.
"""

from __future__ import annotations

import os
import re
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

STORAGE_ENV = "AUTOTUNE_STORAGE"
REDACTED = "***"
_SECRET_KEY = re.compile(r"pass|pwd|secret|token", re.IGNORECASE)
_QUERY_PAIR = re.compile(r"([^&=]+)=([^&]*)")


def storage_url(given: str | None) -> str | None:
    """``--storage`` as given, else ``$AUTOTUNE_STORAGE`` (None: the run folder's journal)."""
    return given or os.environ.get(STORAGE_ENV) or None


def redact(url: str) -> str:
    """``url`` with its password and every secret-looking query value (password=, sslpassword=,
    token=, ...) replaced by ``***``."""
    parts = _split(url)
    if parts is None:  # not a URL; hide what looks like user:password@
        return re.sub(r"(://[^:/@]*:)[^@]*@", rf"\1{REDACTED}@", url)
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:{REDACTED}@{host}"
    query = _QUERY_PAIR.sub(
        lambda m: f"{m[1]}={REDACTED}" if _SECRET_KEY.search(m[1]) else m[0], parts.query
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def secrets_of(url: str) -> list[str]:
    """The secrets :func:`redact` hides, as they are written and decoded."""
    parts = _split(url)
    if parts is None:
        return []
    found = [parts.password] if parts.password else []
    found += [m[2] for m in _QUERY_PAIR.finditer(parts.query) if _SECRET_KEY.search(m[1]) and m[2]]
    return sorted({s for raw in found for s in (raw, unquote(raw))}, key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """``text`` (a driver's message) with every secret of ``url`` replaced by ``***``."""
    for secret in secrets_of(url):  # whole words only: a password "x" leaves "exit" alone
        text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", REDACTED, text)
    return text


def is_redacted(url: str) -> bool:
    """True for a URL whose secrets :func:`redact` hid (as run.json keeps it): it cannot be opened."""
    return REDACTED in secrets_of(url)


def _split(url: str) -> SplitResult | None:
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018  raises ValueError on a malformed port
    except ValueError:
        return None
    return parts if parts.scheme and parts.netloc else None
