"""The catalog's connection pool: a connection for every thread that may hold a session."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import text

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
