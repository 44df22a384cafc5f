"""Where a study lives: a journal file in the run folder, or a database that several workers share.

    python -m autotune run                                                # run_dir/study.journal
    python -m autotune run --storage postgresql://user:pw@host:5432/db    # shared by every worker
    AUTOTUNE_STORAGE=postgresql://user:pw@host:5432/db python -m autotune run   # the same, not in ps

The journal file is :mod:`autotune.search.journal` (a crash cuts it only between entries). A
database URL opens Optuna's ``RDBStorage`` with heartbeats: a worker records its running trial's
heartbeat every ``HEARTBEAT_INTERVAL`` seconds (:func:`heartbeat`), and a trial whose heartbeat is
older than the grace period (its worker was killed, or its machine lost) is failed by the next
worker that looks (:mod:`autotune.search.recovery`), so the study never waits on it. A URL is held
as a :class:`autotune.redact.StorageURL` (it shows only redacted); its password reaches the driver
alone, and a driver's message is scrubbed of it.

``postgresql://`` URLs are opened with psycopg 3 (the ``postgres`` extra): SQLAlchemy before 2.1
reads a bare ``postgresql://`` as psycopg2, so the scheme is rewritten to ``postgresql+psycopg://``;
a URL that names its driver (``postgresql+psycopg2://``) is used as given.
"""

from __future__ import annotations

import contextlib
import hashlib
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import optuna
import sqlalchemy
import sqlalchemy.exc
import sqlalchemy.pool
from optuna.storages import BaseStorage
from sqlalchemy.engine import URL, make_url

from autotune.errors import ConfigError
from autotune.redact import StorageURL, redact, scrub
from autotune.search.journal import open_journal
from autotune.search.retry import retrying

JOURNAL = "study.journal"
HEARTBEAT_INTERVAL = 30
"""Seconds between two heartbeats of a running trial."""
GRACE_PERIOD = 120
"""Seconds without a heartbeat after which another worker marks the trial FAIL."""
CONNECT_TIMEOUT = 10
"""Seconds to wait for a PostgreSQL server before ``--storage`` is reported unreachable."""
SCHEMA_LOCK = int.from_bytes(b"autotune", "big")
"""PostgreSQL advisory lock held while Optuna creates its tables."""

# Study.ask warns about heartbeats outside Study.optimize; :func:`heartbeat` does Optuna's part.
warnings.filterwarnings(
    "ignore", message="Heartbeat of storage is supposed to be used with Study.optimize"
)


def open_storage(
    url: str | StorageURL | None,
    run_dir: Path,
    *,
    heartbeat_interval: int = HEARTBEAT_INTERVAL,
    grace_period: int = GRACE_PERIOD,
) -> BaseStorage:
    """The journal file ``run_dir/study.journal`` when ``url`` is None, else the database at ``url``.

    Raises :class:`ConfigError` naming ``--storage`` (never its password) when the URL is not a
    database URL, its driver is not installed, or the database cannot be opened.
    """
    if url is None:
        run_dir.mkdir(parents=True, exist_ok=True)
        return open_journal(run_dir / JOURNAL)
    source = url.source if isinstance(url, StorageURL) else "--storage"
    url = url.secret() if isinstance(url, StorageURL) else url
    given = _parse(url, source)
    shown = f"{source} {redact(url)}"
    parsed = (
        given.set(drivername="postgresql+psycopg")
        if given.drivername in ("postgresql", "postgres")
        else given
    )
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ConfigError(
            f"{shown}: an SQLite database in memory ends with the run (no report, no resume); give a "
            "file (sqlite:///path/to/study.db), or no --storage for the run folder's journal"
        )
    try:
        storage = _rdb_storage(parsed, heartbeat_interval, grace_period)
    except sqlalchemy.exc.NoSuchModuleError:
        raise ConfigError(
            f"{shown}: {parsed.drivername!r} is not a database SQLAlchemy knows "
            f"(e.g. postgresql://<user>:<password>@<host>:5432/<db>)"
        ) from None
    except ImportError as exc:
        missing = getattr(exc, "name", None) or getattr(exc.__cause__, "name", None) or "its driver"
        extra = (
            " (pip install 'autotune[postgres]')"
            if given.get_backend_name() == "postgresql"
            else ""
        )
        raise ConfigError(
            f"{shown}: the database driver {missing!r} is not installed{extra}"
        ) from None
    except sqlalchemy.exc.SQLAlchemyError as exc:
        raise ConfigError(f"{shown}: cannot open the database: {_reason(exc, url)}") from None
    return retrying(storage, shown, lambda exc: _reason(_database_error(exc), url))


def _database_error(exc: BaseException) -> BaseException:
    """The SQLAlchemy error inside ``exc`` (Optuna wraps a failed commit in its own), else ``exc``."""
    found: BaseException | None = exc
    while found is not None and not isinstance(found, sqlalchemy.exc.SQLAlchemyError):
        found = found.__cause__ or found.__context__
    return found or exc


def _rdb_storage(
    url: URL, heartbeat_interval: int, grace_period: int
) -> optuna.storages.RDBStorage:
    def storage(**engine_kwargs: object) -> optuna.storages.RDBStorage:
        with warnings.catch_warnings():  # heartbeat_interval is "experimental" since Optuna 2.9
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(
                url.render_as_string(hide_password=False),
                engine_kwargs=engine_kwargs,
                heartbeat_interval=heartbeat_interval,
                grace_period=grace_period,
            )

    if url.get_backend_name() != "postgresql":
        return storage()
    # Workers starting together on a fresh database would race on CREATE TABLE (PostgreSQL's
    # IF NOT EXISTS is not atomic: "duplicate key ... pg_type_typname_nsp_index"); the first to
    # take this lock creates Optuna's tables, the others wait and find them.
    connect_args = {"connect_timeout": CONNECT_TIMEOUT}
    engine = sqlalchemy.create_engine(
        url, connect_args=connect_args, poolclass=sqlalchemy.pool.NullPool
    )
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": SCHEMA_LOCK})
            try:
                # pre-ping: a pooled connection that a server restart closed is replaced, not used
                return storage(connect_args=connect_args, pool_pre_ping=True)
            finally:
                conn.execute(
                    sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": SCHEMA_LOCK}
                )
    finally:
        engine.dispose()


@contextmanager
def claiming(study: optuna.Study) -> Iterator[None]:
    """Held while a worker counts the study's trials and asks for the next one, so that two workers
    of a study on PostgreSQL do not both take its last trial (each counting the trials before the
    other's was made). A per-study advisory lock; no lock elsewhere (a journal has one tuner), nor
    while the server is unreachable (the trial count is then as good as the next worker's view)."""
    backend = getattr(study._storage, "_backend", study._storage)
    engine = getattr(backend, "engine", None)
    if engine is None or engine.dialect.name != "postgresql":
        yield
        return
    digest = hashlib.sha256(f"autotune-trials:{study.study_name}".encode()).digest()
    key = {"key": int.from_bytes(digest[:8], "big", signed=True)}
    try:
        conn = engine.connect()
        conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), key)
    except sqlalchemy.exc.SQLAlchemyError:
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(sqlalchemy.exc.SQLAlchemyError):
            conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), key)
        with contextlib.suppress(sqlalchemy.exc.SQLAlchemyError):
            conn.close()


@contextmanager
def heartbeat(study: optuna.Study, trial: optuna.Trial) -> Iterator[None]:
    """Record ``trial``'s heartbeat while the body runs (a no-op without heartbeats)."""
    # Study.optimize does this with Optuna's private helper; ask-and-tell has no public one.
    from optuna.storages._heartbeat import get_heartbeat_thread

    with get_heartbeat_thread(trial._trial_id, study._storage):
        yield


def _parse(url: str, source: str) -> URL:
    try:
        return make_url(url.strip())
    except (sqlalchemy.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        # Without a scheme the redaction cannot tell a password from the rest (a bare password,
        # a libpq "host=h pw" string), so such a value is named by its size alone.
        shown = (
            repr(redact(url)) if "://" in url else f"({len(url.strip())} characters, no scheme://)"
        )
        raise ConfigError(
            f"{source} {shown} is not a database URL "
            f"(e.g. postgresql://<user>:<password>@<host>:5432/<db>)"
        ) from None


def _reason(exc: BaseException, url: str) -> str:
    """The driver's own message (first line), without SQLAlchemy's boilerplate or any secret of ``url``."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    line = " ".join(text[0].split()) if text else type(exc).__name__
    return scrub(line, url)
