"""The catalog's sessions: a connection for every thread that may hold one, a snapshot per read."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import text

from tierd.daemon.catalog.checkpoints import get_or_create_run
from tierd.daemon.catalog.db import POOL_CONNECTIONS, Database


def test_every_thread_that_may_hold_a_session_gets_a_connection(db: Database) -> None:
    """The I/O threads and the API's all in a catalog call at once each get a connection.

    SQLAlchemy's default pool for a SQLite file (5 + 10) made the 16th wait 30 s and then
    fail with ``QueuePool limit of size 5 overflow 10 reached``.
    """
    all_in = threading.Barrier(POOL_CONNECTIONS, timeout=60)

    def read() -> int:
        with db.read_session() as session:
            value = session.execute(text("SELECT 1")).scalar_one()
            all_in.wait()  # every session open at once
            return int(value)

    with ThreadPoolExecutor(POOL_CONNECTIONS) as threads:
        assert list(threads.map(lambda _: read(), range(POOL_CONNECTIONS))) == [1] * POOL_CONNECTIONS
    # The write engine likewise (checked out only: on SQLite each write would wait for the lock).
    held = [db.engine.connect() for _ in range(POOL_CONNECTIONS)]
    for connection in held:
        connection.close()


def test_a_read_session_reads_one_snapshot(db: Database) -> None:
    """What another session commits meanwhile is not seen halfway through a read.

    On PostgreSQL's default isolation each statement saw the latest commit, so the API listed a
    waiting step's part without the expected files committed in the same transaction.
    """
    count = text("SELECT count(*) FROM runs")
    with db.read_session() as reading:
        before = reading.execute(count).scalar_one()
        with db.session() as writing:
            get_or_create_run(writing, "committed-meanwhile")
        assert reading.execute(count).scalar_one() == before
    with db.read_session() as reading:
        assert reading.execute(count).scalar_one() == before + 1
