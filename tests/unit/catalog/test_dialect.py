"""The SQLite/PostgreSQL differences (``catalog.dialect``), each on both backends."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select, text

from tests.unit.catalog.helpers import add_checkpoint
from tierd.daemon.catalog import dialect
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.jobs import enqueue_copy_job
from tierd.daemon.catalog.models import File, Job, JobFileDone
from tierd.daemon.catalog.scheduling import ADVISORY_LOCK_KEY, lock_scheduling


def test_the_dialect_is_the_urls(db: Database) -> None:
    with db.read_session() as s:
        assert dialect.is_postgresql(s) is not db.is_sqlite


def test_insert_ignoring_duplicates_adds_only_new_rows(db: Database) -> None:
    cid = add_checkpoint(db, 1)
    with db.session() as s:
        queued = enqueue_copy_job(s, cid, "nvme", "pfs", 0)
        s.flush()
        job = queued.id
        file_id = s.scalars(select(File.id).where(File.checkpoint_id == cid)).one()
    table = JobFileDone.metadata.tables["job_files_done"]
    for _ in range(2):
        with db.session() as s:
            s.execute(dialect.insert_ignoring_duplicates(s, table), [{"job_id": job, "file_id": file_id}])
    with db.read_session() as s:
        assert s.scalar(select(func.count()).select_from(JobFileDone)) == 1


def test_skip_locked_only_on_postgresql(db: Database) -> None:
    with db.read_session() as s:
        query = dialect.skip_locked(select(Job), s, of=Job)
        sql = str(query.compile(dialect=s.get_bind().dialect))
    assert ("SKIP LOCKED" in sql) is not db.is_sqlite


def test_the_scheduling_lock_keeps_other_daemons_out_until_commit(db: Database) -> None:
    if db.is_sqlite:
        pytest.skip("SQLite's write transaction is the lock: there is no advisory lock to take")
    try_lock = text("SELECT pg_try_advisory_xact_lock(:key)")
    with db.session() as holder:
        lock_scheduling(holder)
        with db.session() as other:
            assert other.scalar(try_lock, {"key": ADVISORY_LOCK_KEY}) is False
    with db.session() as other:
        assert other.scalar(try_lock, {"key": ADVISORY_LOCK_KEY}) is True
