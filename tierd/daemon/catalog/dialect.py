"""Every difference between SQLite and PostgreSQL that the catalog's queries need.

- Claiming a row: PostgreSQL locks it with ``SELECT ... FOR UPDATE SKIP LOCKED``, so
  claimers on many nodes neither wait for each other nor take the same row; on SQLite the
  write transaction (BEGIN IMMEDIATE, see ``db.py``) already serialises claimers.
- Inserting rows that may be there already: ``INSERT ... ON CONFLICT DO NOTHING``, or
  ``DO UPDATE`` to overwrite them (an upsert), spelled with each dialect's own construct. What
  such a statement did is never read from its row count: PostgreSQL's driver may answer -1
  for a row that was there (psycopg 3.3 under SQLAlchemy 2.1 does); ask with ``RETURNING``.
- Serialising one kind of transaction across daemons: ``pg_advisory_xact_lock`` on
  PostgreSQL (released at commit); SQLite's write transaction already holds the one lock.
- The clock of leases: PostgreSQL's ``now()``, one clock for every node of a fleet, so skew
  between nodes cannot make a live lease look expired; SQLite serves one node, whose clock
  it is (its own ``CURRENT_TIMESTAMP`` has whole seconds only).
- Telling the other daemons that jobs were queued (``NOTIFY`` on ``JOBS_CHANNEL``), or that
  a step waits for parts (on ``STEPS_CHANNEL``): sent at commit to every daemon that
  ``LISTEN``s (``listen_for_jobs``, on a connection of its own outside the pool;
  ``pipeline.listen`` reconnects it); SQLite serves one daemon.

The engine set-up (pragmas, BEGIN IMMEDIATE, a separate read engine) lives in ``db.py``.

psycopg is imported by the functions that talk to PostgreSQL themselves (``jobs_conninfo``,
``listen_for_jobs``), and by SQLAlchemy once a PostgreSQL engine is made: a daemon with a
SQLite catalog never loads it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Insert, Select, Table, func, make_url, select, text, type_coerce
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from tierd.daemon.catalog.models import UTCDateTime, utcnow
from tierd.errors import CatalogError

if TYPE_CHECKING:
    from psycopg.pq.abc import PGconn

__all__ = [
    "JOBS_CHANNEL",
    "STEPS_CHANNEL",
    "advisory_xact_lock",
    "insert_ignoring_duplicates",
    "insert_or_update",
    "is_postgresql",
    "jobs_conninfo",
    "lease_clock",
    "libpq_url",
    "listen_for_jobs",
    "notified_nodes",
    "notify_jobs",
    "notify_steps",
    "skip_locked",
]

#: The PostgreSQL notification channel on which a daemon that queued copy jobs tells the others.
JOBS_CHANNEL = "tierd_jobs"
#: The channel on which a daemon that made a waiting step (its first part recorded, a notify)
#: tells the others, whose waiting sweeps may owe it a part; the payload names the sender.
STEPS_CHANNEL = "tierd_steps"

T = TypeVar("T")


def is_postgresql(session: Session) -> bool:
    """Whether ``session`` talks to PostgreSQL (otherwise: SQLite)."""
    return session.get_bind().dialect.name == "postgresql"


def skip_locked(query: Select[T], session: Session, *, of: Any) -> Select[T]:
    """``query`` locking the rows of ``of`` it returns and skipping rows others hold (PostgreSQL)."""
    if is_postgresql(session):
        return query.with_for_update(skip_locked=True, of=of)
    return query


def insert_ignoring_duplicates(session: Session, table: Table) -> Insert:
    """``INSERT INTO table`` that skips rows whose key is already there."""
    if is_postgresql(session):
        return postgresql.insert(table).on_conflict_do_nothing()
    return sqlite.insert(table).on_conflict_do_nothing()


def insert_or_update(
    session: Session, table: Table, key: Collection[str], values: Mapping[str, Any]
) -> Insert:
    """``INSERT INTO table`` of ``values`` that overwrites the row already under ``key`` (its columns).

    Every column of ``values`` outside ``key`` is set from the row this statement tried to insert.
    """
    insert = postgresql.insert(table) if is_postgresql(session) else sqlite.insert(table)
    statement = insert.values(**values)
    changed = {name: statement.excluded[name] for name in values if name not in key}
    return statement.on_conflict_do_update(index_elements=list(key), set_=changed)


def advisory_xact_lock(session: Session, key: int) -> None:
    """Take PostgreSQL's transaction-level advisory lock ``key`` (waits for its holder); no-op on SQLite."""
    if is_postgresql(session):
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


def lease_clock(session: Session) -> datetime:
    """Now, for leases: PostgreSQL's clock (the same for every node), this process's on SQLite."""
    if not is_postgresql(session):
        return utcnow()
    value: datetime = session.scalars(select(type_coerce(func.now(), UTCDateTime()))).one()
    return value


#: Longest payload a notification carries (PostgreSQL's limit is 8000 bytes).
PAYLOAD_LIMIT = 7000


def notify_jobs(session: Session, nodes: Collection[str] | None = None) -> None:
    """Wake the daemons listening on ``JOBS_CHANNEL`` when this transaction commits (PostgreSQL).

    ``nodes``: only those may claim the jobs (each copies its own part); None, or a list
    too long for a payload: every daemon. The payload is the names, comma-separated.
    """
    _notify(session, JOBS_CHANNEL, nodes)


def notify_steps(session: Session, node: str) -> None:
    """Wake the other daemons' waiting sweeps when this transaction commits (PostgreSQL).

    ``node`` (this daemon's) made a waiting step: its first part recorded, or a notify's step.
    """
    _notify(session, STEPS_CHANNEL, [node])


def _notify(session: Session, channel: str, nodes: Collection[str] | None) -> None:
    if not is_postgresql(session):
        return
    payload = ",".join(sorted(nodes)) if nodes is not None else ""
    if len(payload.encode()) > PAYLOAD_LIMIT:
        payload = ""
    session.execute(text("SELECT pg_notify(:channel, :payload)"), {"channel": channel, "payload": payload})


def notified_nodes(payload: str) -> frozenset[str] | None:
    """The nodes a ``notify_jobs`` payload names; None when it is for every daemon."""
    return frozenset(payload.split(",")) if payload else None


#: libpq settings of a listening connection: give up connecting after 10 s; notice a silent
#: peer within about a minute.
LISTEN_OPTIONS = {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10}


def libpq_url(url: str) -> str:
    """The SQLAlchemy URL of a PostgreSQL catalog, as libpq spells it (no driver name)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def jobs_conninfo(url: str) -> str:
    """The libpq connection string ``listen_for_jobs`` takes, for the catalog at ``url``."""
    from psycopg.conninfo import make_conninfo  # PostgreSQL only (see the module docstring)

    return make_conninfo(libpq_url(url), **LISTEN_OPTIONS)


#: What a listener does with a notification: called with the nodes it names (``notified_nodes``).
Heard = Callable[[frozenset[str] | None], None]


async def listen_for_jobs(
    conninfo: str,
    on_listening: Callable[[], None],
    on_jobs: Heard,
    on_steps: Heard | None = None,
) -> None:
    """``LISTEN`` on ``JOBS_CHANNEL`` (and ``STEPS_CHANNEL`` with ``on_steps``) until it breaks (PostgreSQL).

    One connection of its own. Calls ``on_listening`` once listening, then ``on_jobs`` (or
    ``on_steps``) with the nodes each notification names (``notified_nodes``). Raises
    CatalogError when the connection cannot be made or breaks.
    """
    import psycopg  # PostgreSQL only (see the module docstring)
    from psycopg import sql

    handlers = {JOBS_CHANNEL: on_jobs} | ({} if on_steps is None else {STEPS_CHANNEL: on_steps})
    try:
        conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
        async with conn:
            # What psycopg reads itself (beside the LISTEN's answer) comes to this handler.
            conn.add_notify_handler(lambda n: _dispatch(handlers, n.channel, n.payload))
            for channel in handlers:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            on_listening()
            await _read_notifications(conn.pgconn, conn.info.encoding, handlers)
    except (psycopg.Error, OSError) as exc:
        raise CatalogError(str(exc).strip()) from exc


def _dispatch(handlers: Mapping[str, Heard], channel: str, payload: str) -> None:
    handler = handlers.get(channel)
    if handler is not None:
        handler(notified_nodes(payload))


async def _read_notifications(pgconn: PGconn, encoding: str, handlers: Mapping[str, Heard]) -> None:
    """Hand each notification arriving on ``pgconn`` to its channel's handler, until it breaks.

    The loop wakes only when the socket is readable: psycopg's own ``notifies()`` wakes every
    0.1 s while nothing comes (10 wake-ups a second of every idle daemon of a fleet; their CPU
    was below what 3 minutes of an idle daemon show: 0.34 CPU-s a minute either way). A broken
    connection is readable and fails ``consume_input``.
    """
    readable, socket = asyncio.Event(), pgconn.socket
    loop = asyncio.get_running_loop()
    loop.add_reader(socket, readable.set)
    try:
        while True:
            await readable.wait()
            readable.clear()
            pgconn.consume_input()
            while (notify := pgconn.notifies()) is not None:
                _dispatch(handlers, notify.relname.decode(encoding), notify.extra.decode(encoding))
    finally:
        loop.remove_reader(socket)
