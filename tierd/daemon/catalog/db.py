"""Engine and session set-up for SQLite and PostgreSQL.

Every SQLAlchemy error becomes a ``CatalogError`` here, with the driver's own words and
without the SQL statement (``database or disk is full``, ``connection refused``), so a log
line says what went wrong. On PostgreSQL a pooled connection is pinged before use
(``pool_pre_ping``): after a server restart the stale ones are replaced, and a call fails
within ``CONNECT_TIMEOUT_SECONDS`` while the server is away instead of hanging.

Each engine's pool has a connection for every thread that can hold a session at once
(``POOL_CONNECTIONS``: the I/O threads, the API's, and anyio's that serve synchronous
routes, see ``tierd.daemon.aio``), so no catalog call waits for a connection; it keeps
``POOL_KEPT`` of them open between calls. SQLAlchemy's default for a SQLite file (5 kept +
10 more) was what fifty API clients ran dry (``QueuePool limit of size 5 overflow 10
reached``), stalling the pipeline's commits behind them.

``Session`` is the type of what ``Database.session`` yields: code outside the catalog names it
from here (to pass a transaction on to catalog functions), never from SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from tierd.daemon.aio import API_THREADS, MAX_THREADS
from tierd.errors import CatalogConflict, CatalogError

__all__ = [
    "CONNECT_TIMEOUT_SECONDS",
    "POOL_CONNECTIONS",
    "POOL_KEPT",
    "READ_ISOLATION",
    "Database",
    "Session",
    "catalog_error",
]

#: How long opening a PostgreSQL connection may take before the call fails (libpq's
#: ``connect_timeout``): an unreachable catalog answers ``/readyz`` with 503, not a hang.
CONNECT_TIMEOUT_SECONDS = 5
#: The most connections an engine opens: one per thread that may hold a session (the API's
#: requests hold theirs on anyio's threads and on the API's pool, each ``API_THREADS``).
POOL_CONNECTIONS = MAX_THREADS + 2 * API_THREADS
#: Connections kept open between calls (the others are closed when given back): a fleet of
#: daemons on one PostgreSQL keeps its idle connection count low.
POOL_KEPT = 10
#: PostgreSQL's isolation for ``Database.read_session``. Under its default (READ COMMITTED) each
#: statement sees what was committed when it began, so a view built from several statements
#: (a step's row, then its parts, then its files) could mix two states: a waiting step listed
#: a part whose expected files were committed with it, but not those files.
READ_ISOLATION = "REPEATABLE READ"
#: The longest driver message kept in a CatalogError.
_MESSAGE_CHARS = 300


class Database:
    """One engine and session factory for the catalog at ``url``."""

    def __init__(self, url: str, *, busy_timeout_ms: int = 30_000) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self.engine = _make_engine(url, busy_timeout_ms, immediate=True)
        self._read_engine = (
            _make_engine(url, busy_timeout_ms, immediate=False)
            if self.is_sqlite
            else self.engine.execution_options(isolation_level=READ_ISOLATION)
        )
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._read_sessions = sessionmaker(self._read_engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session whose transaction commits on success and rolls back on error.

        Raises CatalogError when the database fails.
        """
        try:
            with self._sessions.begin() as session:
                yield session
        except SQLAlchemyError as exc:
            raise catalog_error(exc) from exc

    @contextmanager
    def read_session(self) -> Iterator[Session]:
        """A session for reads only, all of them from one snapshot of the catalog.

        On SQLite it does not take the write lock (a deferred transaction in WAL mode reads one
        snapshot); on PostgreSQL it is ``READ_ISOLATION``.

        Raises CatalogError when the database fails.
        """
        try:
            with self._read_sessions.begin() as session:
                yield session
        except SQLAlchemyError as exc:
            raise catalog_error(exc) from exc

    def ping(self) -> None:
        """Run ``SELECT 1``; raises CatalogError when the catalog is unreachable."""
        with self.read_session() as session:
            session.execute(text("SELECT 1"))

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
        if self.is_sqlite:  # PostgreSQL's read engine shares the write engine's pool
            self._read_engine.dispose()


def catalog_error(exc: SQLAlchemyError) -> CatalogError:
    """The CatalogError for ``exc``: its class and the driver's message, without the SQL."""
    orig = getattr(exc, "orig", None)
    text_ = " ".join(str(orig if orig is not None else exc).split())
    if len(text_) > _MESSAGE_CHARS:
        text_ = text_[: _MESSAGE_CHARS - 3] + "..."
    kind = CatalogConflict if isinstance(exc, sa_exc.IntegrityError) else CatalogError
    return kind(f"catalog error: {exc.__class__.__name__}: {text_}")


def _make_engine(url: str, busy_timeout_ms: int, *, immediate: bool) -> Engine:
    if url.startswith("sqlite"):
        _ensure_sqlite_dir(url)
        engine = create_engine(url, connect_args={"timeout": busy_timeout_ms / 1000}, **_pool_sizes(url))
        event.listen(engine, "connect", _sqlite_pragmas(busy_timeout_ms))
        # pysqlite defers BEGIN; emit it ourselves so that write transactions take the
        # lock up front instead of failing to upgrade a read lock later.
        begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"
        event.listen(engine, "begin", lambda conn: conn.exec_driver_sql(begin))
        return engine
    return create_engine(
        url,
        pool_pre_ping=True,
        **_pool_sizes(url),
        connect_args={"connect_timeout": CONNECT_TIMEOUT_SECONDS},
    )


def _pool_sizes(url: str) -> dict[str, int]:
    """QueuePool's sizes (none for an in-memory SQLite database, which has one connection)."""
    if url.startswith("sqlite") and (":memory:" in url or url.rstrip("/").endswith(":")):
        return {}
    return {"pool_size": POOL_KEPT, "max_overflow": POOL_CONNECTIONS - POOL_KEPT}


def _ensure_sqlite_dir(url: str) -> None:
    path = url.split(":///", 1)[-1].split("?", 1)[0]
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)


def _sqlite_pragmas(busy_timeout_ms: int) -> Any:
    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # let the "begin" listener issue BEGIN
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    return on_connect
