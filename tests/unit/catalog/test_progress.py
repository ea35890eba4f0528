"""A hop's progress and a job run's end (``catalog.progress``, ``catalog.jobs``), on both backends."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select, update

from tests.unit.catalog.helpers import add_checkpoint, jobs, replica
from tierd.daemon.catalog import progress
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.jobs import end_job_run, enqueue_copy_job, fail_job_run, owned_job
from tierd.daemon.catalog.models import File, Job, JobFileDone, JobState, utcnow

OWNER = "n1:1"


def running_job(db: Database, files: int) -> tuple[int, int, dict[str, int]]:
    """(checkpoint id, job id, relpath -> file id) of a job ``OWNER`` holds, with ``files`` files more."""
    cid = add_checkpoint(db, 1, ("verified", "copying", "pending", "pending"))
    with db.session() as s:
        s.add_all(
            File(checkpoint_id=cid, relpath=f"f{n}", size=1, checksum_algo="crc", checksum="x")
            for n in range(files)
        )
        job = enqueue_copy_job(s, cid, "nvme", "pfs", 0)
        job.state, job.lease_owner = JobState.RUNNING.value, OWNER
        s.flush()
        query = select(File.relpath, File.id).where(File.checkpoint_id == cid)
        ids = {relpath: file_id for relpath, file_id in s.execute(query)}
        return cid, job.id, ids


def rows(db: Database) -> int:
    with db.read_session() as s:
        return s.scalar(select(func.count()).select_from(JobFileDone)) or 0


def test_files_done_are_added_once_and_read_back(db: Database) -> None:
    _, job_id, ids = running_job(db, 3)
    with db.session() as s:
        job = owned_job(s, job_id, OWNER)
        assert job is not None
        assert progress.files_done(s, job, ids) == frozenset()
        progress.record_files_done(s, job, [ids["f0"], ids["f1"]])
        progress.record_files_done(s, job, [ids["f1"]])  # already there: ignored
        assert job.detail == {"resumable": True}
        assert progress.files_done(s, job, ids) == {"f0", "f1"}
    assert rows(db) == 2
    with db.session() as s:
        job = owned_job(s, job_id, OWNER)
        assert job is not None
        progress.record_files_done(s, job, [])  # nothing new: the job stays resumable
        assert job.detail == {"resumable": True}
        assert owned_job(s, job_id, "someone-else") is None


def test_a_list_recorded_before_the_table_counts_and_is_forgotten(db: Database) -> None:
    _, job_id, ids = running_job(db, 2)
    with db.session() as s:
        s.execute(update(Job).values(detail={"done": ["f1"]}))
    with db.session() as s:
        job = owned_job(s, job_id, OWNER)
        assert job is not None
        progress.record_files_done(s, job, [ids["f0"]])
        assert progress.files_done(s, job, ids) == {"f0", "f1"}
        progress.forget_files_done(s, job)
        assert progress.files_done(s, job, ids) == frozenset()
    assert rows(db) == 0
    assert "done" not in jobs(db)[0].detail


def test_bytes_done_only_while_copying(db: Database) -> None:
    cid, _, _ = running_job(db, 0)
    with db.session() as s:
        progress.record_bytes_done(s, cid, "pfs", 100)
        progress.record_bytes_done(s, cid, "s3", 100)  # pending: not copying
    assert (replica(db, cid, "pfs").bytes_done, replica(db, cid, "s3").bytes_done) == (100, 0)


def test_a_run_that_ends_for_good_forgets_its_files_a_failed_one_keeps_them(db: Database) -> None:
    _, job_id, ids = running_job(db, 2)
    retry_at = utcnow() + timedelta(minutes=1)
    with db.session() as s:
        job = owned_job(s, job_id, OWNER)
        assert job is not None
        progress.record_files_done(s, job, list(ids.values()))
        fail_job_run(s, job, "503", reason="retryable", retry_at=retry_at)
    [job] = jobs(db)
    assert (job.state, job.attempts, job.lease_owner, job.last_error) == ("queued", 1, None, "503")
    assert (job.not_before, job.detail["reason"], rows(db)) == (retry_at, "retryable", len(ids))
    with db.session() as s:
        loaded = s.get(Job, job_id)
        assert loaded is not None
        fail_job_run(s, loaded, "denied", reason="permanent", retry_at=None)
    assert (jobs(db)[0].state, jobs(db)[0].attempts, rows(db)) == ("failed", 2, len(ids))
    with db.session() as s:
        loaded = s.get(Job, job_id)
        assert loaded is not None
        end_job_run(s, loaded, JobState.CANCELLED, "gone")
    assert (jobs(db)[0].state, jobs(db)[0].last_error, rows(db)) == ("cancelled", "gone", 0)
