"""Secrets hidden by construction: the one redaction every stored or printed URL goes through.

    redact("postgresql://u:2024#Spring@h/db?sslpassword=x&sslmode=require")
    # -> "postgresql://u:***@h/db?sslpassword=***&sslmode=require"

A password may hold any character (``#``, ``?``, ``/``, ``@``, percent-escapes), and the parsers
that read a URL disagree about where it ends: ``urllib`` ends the host at the first ``#`` or ``?``
(``u:2024#Spring@h`` reads as host ``u``, port 2024), SQLAlchemy ends the password at the first
``@``, and an ``@`` inside a query value moves the "last ``@``". So the redaction trusts no one
reading: it hides the union of every reading's secrets (the user's part up to the last ``@``
after its first ``:``, SQLAlchemy's password, every secret-looking query value, taken from the
first ``?`` on). That may hide more than the password (the host too, in odd URLs), never less.

:class:`StorageURL` holds a URL whose ``str``, ``repr`` and f-string are the redacted form; only
:meth:`StorageURL.secret` gives the URL with its password, for the database driver. JSON and YAML
writers refuse the object itself, so a record that stores one must store ``str(url)``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import unquote

REDACTED = "***"
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)(.*)\Z", re.DOTALL)
_SECRET_KEY = re.compile(r"pass|pwd|secret|token|key", re.IGNORECASE)
_DRIVER_PASSWORD = re.compile(r"[^:/]*:([^@]*)@")
"""Where SQLAlchemy's ``make_url`` reads the password: after the user, up to the first ``@``."""
_WORD_SECRET = re.compile(r"((?:pass|pwd|secret|token)[\w-]*\s*[=:]\s*)(\S+)", re.IGNORECASE)
"""``password=x`` in a text that is not a URL (a libpq ``key=value`` string)."""
_SECRET_VARIABLE = re.compile(
    r"TOKEN|SECRET|PASSW|API_?KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL", re.IGNORECASE
)
"""Names of environment variables that hold a secret: HF_TOKEN, WANDB_API_KEY, PGPASSWORD, ..."""
_USERINFO = re.compile(r"([a-zA-Z][\w+.-]{0,31}:/{1,2}[^\s/@:]*:)(\S+)(@)")
"""``scheme://user:`` then the password, up to the token's last ``@`` (a password may hold one)."""
_PLACEHOLDER = re.compile(r"<\w+>")
SHORTEST_SECRET = 6
"""A shorter value (``1``, ``true``) is a flag, not a secret: hiding it would garble any text."""


def redact(text: str) -> str:
    """``text`` (a URL, or any command-line word) with its password and every secret-looking query
    value (password=, sslpassword=, token=, ...) replaced by ``***``."""
    text = text.strip()
    match = _SCHEME.match(text)
    if match is None:  # not a URL: whatever comes before an "@" may be user:password
        head, at, tail = text.rpartition("@")
        return _WORD_SECRET.sub(rf"\g<1>{REDACTED}", f"{REDACTED}@{tail}" if at else text)
    scheme, rest = match.groups()
    for begin, end in reversed(_spans(rest)):
        rest = f"{rest[:begin]}{REDACTED}{rest[end:]}"
    return f"{scheme}{rest}"


def secrets_of(url: str) -> list[str]:
    """The secrets :func:`redact` hides, as written, percent-decoded, and as SQLAlchemy reads the
    password; longest first (so that :func:`scrub` hides a whole secret before a part of it)."""
    found: list[str] = []
    match = _SCHEME.match(url.strip())
    if match is not None:
        rest = match.group(2)
        found += [rest[begin:end] for begin, end in _spans(rest, merge=False)]
        found.append(_driver_password(url) or "")
    return sorted({s for raw in found if raw for s in (raw, unquote(raw))}, key=len, reverse=True)


def _spans(rest: str, *, merge: bool = True) -> list[tuple[int, int]]:
    """Where the secrets are in ``rest`` (the URL after ``scheme://``) by every reading; merged and
    in order unless ``merge`` is False."""
    spans = []
    userinfo, at, _ = rest.rpartition("@")
    if at and ":" in userinfo:
        spans.append((userinfo.index(":") + 1, len(userinfo)))
    if driver := _DRIVER_PASSWORD.match(rest):
        spans.append(driver.span(1))
    if (question := rest.find("?")) >= 0:
        spans += [
            (question + 1 + b, question + 1 + e) for b, e in _query_spans(rest[question + 1 :])
        ]
    if not merge:
        return spans
    merged: list[tuple[int, int]] = []
    for begin, end in sorted(spans):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((begin, end))
    return merged


def _query_spans(query: str) -> list[tuple[int, int]]:
    """Where the values of secret-looking keys are in ``query``; a piece without ``=`` after a value
    continues that value (an unescaped ``&`` inside a password)."""
    spans: list[tuple[int, int]] = []
    offset, secret = 0, False
    for piece in query.split("&"):
        key, eq, _ = piece.partition("=")
        if eq:
            secret = _secret(key)
            if secret:
                spans.append((offset + len(key) + 1, offset + len(piece)))
        elif secret and spans:  # the value of the secret before it goes on
            spans[-1] = (spans[-1][0], offset + len(piece))
        offset += len(piece) + 1
    return spans


def scrub(text: str, url: str) -> str:
    """``text`` (a driver's message) with every secret of ``url`` replaced by ``***``."""
    for secret in secrets_of(url):  # whole words only: a password "x" leaves "exit" alone
        text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", REDACTED, text)
    return text


def environment_secrets(env: Mapping[str, str] = os.environ) -> list[str]:
    """The values of every secret-looking variable of ``env`` and the secrets of
    ``$AUTOTUNE_STORAGE`` (a run inherits them), longest first; a value shorter than
    ``SHORTEST_SECRET`` is left out."""
    found = {v for k, v in env.items() if _SECRET_VARIABLE.search(k)}
    found.update(secrets_of(env.get("AUTOTUNE_STORAGE", "")))
    return sorted((s for s in found if len(s) >= SHORTEST_SECRET), key=len, reverse=True)


def _replace_all(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


def hide_secrets(line: str, secrets: list[str] | None = None) -> str:
    """A line or text the tool prints or writes (an error naming what the user gave, a trial's
    output, a failed run's message and traceback, which the workload wrote): the
    password of any URL in it (also one a path's normalising left ``scheme:/user:password@``) and
    ``secrets`` (default :func:`environment_secrets`, which a caller of many lines finds once)
    replaced by ``***``."""
    line = _USERINFO.sub(_hide_password, line)
    return _replace_all(line, environment_secrets() if secrets is None else secrets)


def _hide_password(match: re.Match) -> str:
    user, password, at = match.groups()
    if _PLACEHOLDER.fullmatch(password):  # an example's ``<password>``: nothing to hide
        return match.group()
    return f"{user}{REDACTED}{at}"


def is_redacted(url: str) -> bool:
    """True for a URL whose secrets :func:`redact` hid (as run.json keeps it): it cannot be opened."""
    return REDACTED in secrets_of(url)


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with every word through :func:`redact` (``--storage URL``, ``--storage=URL``)."""
    out = []
    for word in argv:
        flag, eq, value = word.partition("=")
        out.append(f"{flag}={redact(value)}" if word.startswith("--") and eq else redact(word))
    return out


class StorageURL:
    """A database URL that shows itself only redacted; :meth:`secret` is for the driver alone."""

    __slots__ = ("_url", "source")

    def __init__(self, url: str, source: str = "--storage") -> None:
        self._url = url.strip()
        self.source = source
        """Where the user gave it (``--storage``, ``$AUTOTUNE_STORAGE``): what an error names."""

    @classmethod
    def of(cls, url: str | StorageURL | None) -> StorageURL | None:
        return url if url is None or isinstance(url, StorageURL) else cls(url)

    def secret(self) -> str:
        """The URL as given, password included: pass it to the database driver, never to a file."""
        return self._url

    def __str__(self) -> str:
        return redact(self._url)

    def __repr__(self) -> str:
        return f"StorageURL({redact(self._url)!r})"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StorageURL) and other._url == self._url

    def __hash__(self) -> int:
        return hash(self._url)

    def __reduce__(self):  # pickling (a process pool) keeps the URL usable in the other process
        return (StorageURL, (self._url, self.source))


def _secret(key: str) -> bool:
    return bool(_SECRET_KEY.search(unquote(key)))


def _driver_password(url: str) -> str | None:
    """The password as SQLAlchemy reads it (it may end earlier than :func:`redact`'s)."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url.strip()).password
    except Exception:  # noqa: BLE001  not a URL SQLAlchemy parses: it sends no password either
        return None
