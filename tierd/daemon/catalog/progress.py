"""A running hop's progress: the files a copy job has finished and the bytes it has copied.

A row per finished file in ``job_files_done``, added as files finish, so that recording
progress costs what is new, not the whole list again. The rows go when the job ends for
good (done, cancelled) or with the file's row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from tierd.daemon.catalog.dialect import insert_ignoring_duplicates, is_postgresql
from tierd.daemon.catalog.models import Job, JobFileDone, ReplicaState
from tierd.daemon.catalog.replicas import find_replica

__all__ = ["files_done", "forget_files_done", "mark_job_started", "record_bytes_done", "record_files_done"]

_JOB_FILES_DONE = JobFileDone.metadata.tables[JobFileDone.__tablename__]


def record_files_done(session: Session, job: Job, file_ids: Sequence[int]) -> None:
    """Add the files (by id) the job finished, ignoring those already recorded; mark the job resumable.

    Inserted through the table, not the ORM class: half the CPU per row (3 us instead
    of 7 on SQLite). On SQLite the statement, compiled once, goes to the driver's
    ``executemany`` with plain tuples: SQLAlchemy's processing of each row's parameters
    was 14 us of CPU a row against 5 (5,000 files: 0.05 s of a hop's 2 CPU-s).
    PostgreSQL keeps SQLAlchemy's "insertmanyvalues" (a few statements of many rows each).
    """
    if file_ids:
        statement = insert_ignoring_duplicates(session, _JOB_FILES_DONE)
        compiled = None if is_postgresql(session) else statement.compile(dialect=session.get_bind().dialect)
        if compiled is not None and compiled.positiontup == ["job_id", "file_id"]:
            session.connection().exec_driver_sql(str(compiled), [(job.id, file_id) for file_id in file_ids])
        else:
            session.execute(statement, [{"job_id": job.id, "file_id": file_id} for file_id in file_ids])
    if not (job.detail or {}).get("resumable"):
        job.detail = {**(job.detail or {}), "resumable": True}  # a later attempt looks before copying


def mark_job_started(job: Job) -> bool:
    """Mark the job's run started (resumable); returns whether an earlier run had started.

    An earlier run may have written files it could not record (the catalog was away when
    they finished, or when the hop did): a later one looks for them before copying.
    """
    detail = job.detail or {}
    earlier = bool(detail.get("resumable")) or "done" in detail
    if not detail.get("resumable"):
        job.detail = {**detail, "resumable": True}
    return earlier


def record_bytes_done(session: Session, checkpoint_id: int, tier: str, bytes_done: int) -> None:
    """The bytes copied so far into the checkpoint's ``copying`` replica on ``tier``."""
    replica = find_replica(session, checkpoint_id, tier)
    if replica is not None and replica.state == ReplicaState.COPYING.value:
        replica.bytes_done = bytes_done


def files_done(session: Session, job: Job, ids: Mapping[str, int]) -> frozenset[str]:
    """The files (by relpath, of ``ids``: relpath -> file id) an earlier attempt of ``job`` finished."""
    recorded = set(session.scalars(select(JobFileDone.file_id).where(JobFileDone.job_id == job.id)))
    legacy = (job.detail or {}).get("done", [])  # recorded before catalog revision 0003
    return frozenset(relpath for relpath, file_id in ids.items() if file_id in recorded).union(legacy)


def forget_files_done(session: Session, job: Job) -> None:
    """Drop the job's record of finished files (it will not run again)."""
    # No JobFileDone object is held in a session: no search of the session for them.
    session.execute(
        delete(JobFileDone).where(JobFileDone.job_id == job.id),
        execution_options={"synchronize_session": False},
    )
    if "done" in (job.detail or {}):
        job.detail = {k: v for k, v in job.detail.items() if k != "done"}
