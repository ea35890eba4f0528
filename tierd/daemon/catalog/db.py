"""Engine and session set-up for SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from tierd.errors import CatalogError

__all__ = ["Database"]


class Database:
    """One engine and session factory for the catalog at ``url``."""

    def __init__(self, url: str, *, busy_timeout_ms: int = 30_000) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self.engine = _make_engine(url, busy_timeout_ms, immediate=True)
        self._read_engine = (
            _make_engine(url, busy_timeout_ms, immediate=False) if self.is_sqlite else self.engine
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
            raise CatalogError(f"catalog error: {exc.__class__.__name__}: {exc}") from exc

    @contextmanager
    def read_session(self) -> Iterator[Session]:
        """A session for reads only; on SQLite it does not take the write lock.

        Raises CatalogError when the database fails.
        """
        try:
            with self._read_sessions.begin() as session:
                yield session
        except SQLAlchemyError as exc:
            raise CatalogError(f"catalog error: {exc.__class__.__name__}: {exc}") from exc

    def ping(self) -> None:
        """Run ``SELECT 1``; raises CatalogError when the catalog is unreachable."""
        with self.read_session() as session:
            session.execute(text("SELECT 1"))

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
        self._read_engine.dispose()


def _make_engine(url: str, busy_timeout_ms: int, *, immediate: bool) -> Engine:
    if url.startswith("sqlite"):
        _ensure_sqlite_dir(url)
        engine = create_engine(url, connect_args={"timeout": busy_timeout_ms / 1000})
        event.listen(engine, "connect", _sqlite_pragmas(busy_timeout_ms))
        # pysqlite defers BEGIN; emit it ourselves so that write transactions take the
        # lock up front instead of failing to upgrade a read lock later.
        begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"
        event.listen(engine, "begin", lambda conn: conn.exec_driver_sql(begin))
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10)


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
