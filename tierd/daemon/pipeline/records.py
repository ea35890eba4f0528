"""The catalog writes of one running hop: start, progress, verified, failed, cancelled.

Every write is conditional on the job's lease owner, so a worker that lost its lease
(it stalled, another worker took the job) changes nothing; the functions then return
False or None and the worker stops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import (
    AuditEvent,
    Checkpoint,
    File,
    Job,
    JobFileDone,
    JobState,
    Replica,
    ReplicaState,
    utcnow,
)
from tierd.daemon.pipeline.jobs import Claim
from tierd.daemon.pipeline.resume import forget_uploads
from tierd.daemon.pipeline.scheduler import GONE, choose_source

__all__ = [
    "ACTOR",
    "FileSpec",
    "HopPlan",
    "cancel",
    "mark_failed",
    "mark_verified",
    "save_progress",
    "start_hop",
]

ACTOR = "pipeline"


@dataclass(frozen=True)
class FileSpec:
    """A file to copy, with the checksum recorded at first sight."""

    relpath: str
    size: int
    checksum: str
    mtime_ns: int


@dataclass(frozen=True)
class HopPlan:
    """What a claimed job copies: from which tier, which files, and what is already done."""

    claim: Claim
    src_tier: str
    path: str
    files: tuple[FileSpec, ...]
    done: frozenset[str]
    file_ids: Mapping[str, int] = field(default_factory=dict)  # the catalog's row of each file

    @property
    def total_bytes(self) -> int:
        """Bytes of every file of the checkpoint."""
        return sum(f.size for f in self.files)


def _owned(session: Session, claim: Claim, owner: str) -> Job | None:
    job = session.get(Job, claim.job_id)
    if job is None or job.lease_owner != owner or job.state != JobState.RUNNING.value:
        return None
    return job


def _replica(session: Session, checkpoint_id: int, tier: str) -> Replica | None:
    return session.scalars(
        select(Replica).where(Replica.checkpoint_id == checkpoint_id, Replica.tier == tier)
    ).one_or_none()


def start_hop(db: Database, claim: Claim, owner: str, tiers: Sequence[str]) -> HopPlan | None:
    """Pick the source, mark the replica ``copying``; None when there is nothing to do.

    When no tier can serve as source any more (or the destination no longer needs a
    copy) the job is cancelled; the scheduler queues a new one when that changes.
    """
    with db.session() as session:
        job = _owned(session, claim, owner)
        ckpt = session.get(Checkpoint, claim.checkpoint_id)
        if job is None:
            return None
        if ckpt is None:
            _close(session, job, JobState.CANCELLED, "checkpoint is gone")
            return None
        rows = {r.tier: r for r in session.scalars(select(Replica).where(Replica.checkpoint_id == ckpt.id))}
        states = [rows[t].state if t in rows else None for t in tiers]
        dst = rows.get(claim.dst_tier)
        src = choose_source(states, tiers.index(claim.dst_tier)) if claim.dst_tier in tiers else None
        if src is None or dst is None or dst.state == ReplicaState.VERIFIED.value or dst.state in GONE:
            _close(session, job, JobState.CANCELLED, "no verified source tier, or nothing left to copy")
            return None
        job.src_tier = tiers[src]
        dst.state, dst.error = ReplicaState.COPYING.value, None
        query = select(File).where(File.checkpoint_id == ckpt.id).order_by(File.relpath)
        files = list(session.scalars(query))
        specs = tuple(FileSpec(f.relpath, f.size, f.checksum, f.mtime_ns) for f in files)
        ids = {f.relpath: f.id for f in files}
        return HopPlan(claim, tiers[src], ckpt.path, specs, _done(session, job, ids), ids)


def _done(session: Session, job: Job, ids: Mapping[str, int]) -> frozenset[str]:
    """The files an earlier attempt of ``job`` finished."""
    recorded = set(session.scalars(select(JobFileDone.file_id).where(JobFileDone.job_id == job.id)))
    legacy = (job.detail or {}).get("done", [])  # recorded before catalog revision 0003
    return frozenset(relpath for relpath, file_id in ids.items() if file_id in recorded).union(legacy)


def save_progress(
    db: Database,
    claim: Claim,
    owner: str,
    bytes_done: int,
    finished: Sequence[int],
    *,
    lease_seconds: float | None = None,
) -> bool:
    """Record bytes copied and the files (by id) finished since, renewing the lease when asked.

    Files already recorded are ignored. False if the lease is lost.
    """
    with db.session() as session:
        job = _owned(session, claim, owner)
        if job is None:
            return False
        if finished:
            rows = [{"job_id": job.id, "file_id": file_id} for file_id in finished]
            session.execute(_insert_ignoring_known(session), rows)
        if not (job.detail or {}).get("resumable"):
            job.detail = {**(job.detail or {}), "resumable": True}  # a later attempt looks before copying
        if lease_seconds is not None:
            job.lease_expires_at = utcnow() + timedelta(seconds=lease_seconds)
        replica = _replica(session, claim.checkpoint_id, claim.dst_tier)
        if replica is not None and replica.state == ReplicaState.COPYING.value:
            replica.bytes_done = bytes_done
        return True


def _insert_ignoring_known(session: Session) -> Any:
    """INSERT into ``job_files_done`` that skips rows already there.

    Of the table, not the ORM class: half the CPU per row (3 us instead of 7 on SQLite).
    """
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    return dialect.insert(JobFileDone.__table__).on_conflict_do_nothing()


def _forget_done(session: Session, job: Job) -> None:
    """Drop the job's record of finished files (it will not run again)."""
    session.execute(delete(JobFileDone).where(JobFileDone.job_id == job.id))
    if "done" in (job.detail or {}):
        job.detail = {k: v for k, v in job.detail.items() if k != "done"}


def mark_verified(db: Database, plan: HopPlan, owner: str, location: str, seconds: float) -> bool:
    """Every file matched: replica verified, job done, audit event, upload records dropped."""
    claim = plan.claim
    with db.session() as session:
        job = _owned(session, claim, owner)
        replica = _replica(session, claim.checkpoint_id, claim.dst_tier)
        if job is None or replica is None:
            return False
        now = utcnow()
        replica.state, replica.error, replica.verified_at = ReplicaState.VERIFIED.value, None, now
        replica.location, replica.bytes_done = location, plan.total_bytes
        _close(session, job, JobState.DONE, None)
        forget_uploads(session, claim.checkpoint_id, claim.dst_tier)
        detail = {
            "source": plan.src_tier,
            "files": len(plan.files),
            "bytes": plan.total_bytes,
            "seconds": round(seconds, 3),
        }
        _audit(
            session, claim, "replica_verified", f"copied from {plan.src_tier}; every checksum matched", detail
        )
        return True


def mark_failed(
    db: Database, plan: HopPlan, owner: str, error: str, *, retry_at: datetime | None, reason: str
) -> bool:
    """The hop failed: replica failed with ``error``; the job retried at ``retry_at`` or failed for good."""
    claim = plan.claim
    with db.session() as session:
        job = _owned(session, claim, owner)
        if job is None:
            return False
        replica = _replica(session, claim.checkpoint_id, claim.dst_tier)
        if replica is not None:
            replica.state, replica.error = ReplicaState.FAILED.value, error
        job.attempts += 1
        job.detail = {**(job.detail or {}), "reason": reason}
        if retry_at is None:
            _close(session, job, JobState.FAILED, error)
            forget_uploads(session, claim.checkpoint_id, claim.dst_tier)
        else:
            _close(session, job, JobState.QUEUED, error)
            job.not_before = retry_at
        detail: dict[str, Any] = {"source": plan.src_tier, "reason": reason, "attempts": job.attempts}
        detail["retry_at"] = retry_at.isoformat() if retry_at is not None else None
        _audit(session, claim, "replica_failed", error, detail)
        return True


def cancel(db: Database, claim: Claim, owner: str, why: str) -> bool:
    """Cancel a job that has nothing to do."""
    with db.session() as session:
        job = _owned(session, claim, owner)
        if job is None:
            return False
        _close(session, job, JobState.CANCELLED, why)
        return True


def _close(session: Session, job: Job, state: JobState, error: str | None) -> None:
    """End the job's run in ``state``; one that ends for good (done, cancelled) forgets its files."""
    if state in (JobState.DONE, JobState.CANCELLED):
        _forget_done(session, job)
    job.state = state.value
    job.lease_owner = None
    job.lease_expires_at = None
    job.last_error = error


def _audit(session: Session, claim: Claim, action: str, reason: str, detail: dict[str, Any]) -> None:
    session.add(
        AuditEvent(
            actor=ACTOR,
            action=action,
            checkpoint_id=claim.checkpoint_id,
            tier=claim.dst_tier,
            reason=reason,
            detail=detail,
        )
    )
