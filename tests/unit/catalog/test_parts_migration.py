"""Revision 0005 (SQLite and PostgreSQL): each recorded checkpoint becomes one part on its node."""

from __future__ import annotations

from sqlalchemy import text

from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.migrate import upgrade

ROWS = [
    "INSERT INTO runs (id, name, created_at) VALUES (1, 'demo', '2026-01-01T00:00:00+00:00')",
    "INSERT INTO checkpoints (id, run_id, step, path, format, state, node, pinned, metrics, total_bytes,"
    " file_count, created_at) VALUES (1, 1, 5, 'demo/s5', 'dcp', 'complete', 'n1', false, '{}', 30, 2,"
    " '2026-01-01T00:00:00+00:00'), (2, 1, 6, 'demo/s6', 'dcp', 'waiting', 'n1', false, '{}', 0, 0,"
    " '2026-01-01T00:01:00+00:00')",
    "INSERT INTO files (checkpoint_id, relpath, size, mtime_ns, checksum_algo, checksum) VALUES"
    " (1, 'demo/s5/a', 10, 1, 'crc64nvme', 'x'), (1, 'demo/s5/b', 20, 2, 'crc64nvme', 'y')",
    "INSERT INTO replicas (checkpoint_id, tier, tier_index, state, location, bytes_done, updated_at) VALUES"
    " (1, 'nvme', 0, 'verified', '/n', 30, '2026-01-01T00:00:00+00:00'),"
    " (1, 'pfs', 1, 'copying', '', 7, '2026-01-01T00:00:00+00:00')",
]


def test_recorded_checkpoints_become_one_part_with_their_files_and_replicas(db_url: str) -> None:
    db = Database(db_url)
    try:
        upgrade(db, "0004")
        with db.engine.begin() as conn:
            for statement in ROWS:
                conn.execute(text(statement))
        upgrade(db)
        with db.engine.connect() as conn:
            parts = conn.execute(text("SELECT checkpoint_id, node, file_count, total_bytes FROM parts")).all()
            files = conn.execute(text("SELECT DISTINCT part_id FROM files")).all()
            tiers = conn.execute(
                text("SELECT tier, state, bytes_done FROM part_replicas ORDER BY tier")
            ).all()
            waiting = conn.execute(text("SELECT id FROM checkpoints WHERE waiting_since IS NOT NULL")).all()
        assert [tuple(p) for p in parts] == [(1, "n1", 2, 30)]
        assert len(files) == 1
        assert files[0][0] is not None
        assert [tuple(t) for t in tiers] == [("nvme", "verified", 30), ("pfs", "copying", 7)]
        assert [w[0] for w in waiting] == [2]
    finally:
        db.dispose()
