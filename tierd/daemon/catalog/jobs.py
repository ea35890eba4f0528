"""Copy jobs and their leases: enqueue, claim, renew, release, requeue, end.

A job is claimable when it is ``queued`` (and its ``not_before`` has passed) or when it is
``running`` under a lease that has expired (its worker died). On PostgreSQL the claim
uses ``SELECT ... FOR UPDATE SKIP LOCKED`` (see ``dialect``) so workers on many nodes never
wait for each other or take the same job; on SQLite the write transaction (BEGIN
IMMEDIATE) already serialises claimers. Every change to a running job is conditional on
its lease owner, so a worker that lost its lease cannot overwrite the new owner's work.
The functions taking a loaded ``Job`` change it inside the caller's transaction.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session, object_session

from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.dialect import lease_clock, skip_locked
from tierd.daemon.catalog.models import Checkpoint, Job, JobKind, JobState, Part, utcnow
from tierd.daemon.catalog.progress import forget_files_done
from tierd.daemon.catalog.replicas import requeue_copying_part, requeue_copying_replica

__all__ = [
    "OPEN_STATES",
    "Claim",
    "cancel_copy_jobs",
    "claim_next_copy_job",
    "end_job_run",
    "enqueue_copy_job",
    "extend_lease",
    "fail_job_run",
    "open_copy_hops",
    "open_part_hops",
    "owned_job",
    "owner_id",
    "release_job",
    "renew_lease",
    "requeue_failed_jobs",
    "requeue_orphaned_jobs",
    "set_job_source",
]

#: Job states that mean "this hop is taken care of": the scheduler adds no second job.
OPEN_STATES = (JobState.QUEUED.value, JobState.RUNNING.value, JobState.FAILED.value)


@dataclass(frozen=True)
class Claim:
    """A copy job this worker now holds a lease on."""

    job_id: int
    checkpoint_id: int
    src_tier: str | None
    dst_tier: str
    priority: int
    attempts: int
    detail: dict[str, Any] = field(default_factory=dict)
    #: The node's part this job copies (a hop out of a node-local tier), or None: every file.
    part_id: int | None = None


def owner_id(node: str, pid: int | None = None) -> str:
    """The lease owner name of this process: ``node:pid`` (``requeue_orphaned_jobs`` reads the node)."""
    return f"{node}:{pid if pid is not None else os.getpid()}"


def enqueue_copy_job(
    session: Session, checkpoint_id: int, src: str, dst: str, priority: int, *, part_id: int | None = None
) -> Job:
    """Add a queued copy job for one hop (of one part with ``part_id``), in the caller's transaction."""
    job = Job(
        kind=JobKind.COPY.value,
        checkpoint_id=checkpoint_id,
        src_tier=src,
        dst_tier=dst,
        part_id=part_id,
        state=JobState.QUEUED.value,
        priority=priority,
        detail={},
    )
    session.add(job)
    return job


def claim_next_copy_job(
    db: Database,
    owner: str,
    dst_tiers: Collection[str],
    *,
    lease_seconds: float,
    node: str | None = None,
    local_tier: str | None = None,
    now: datetime | None = None,
) -> Claim | None:
    """Take the highest-priority claimable copy job into one of ``dst_tiers``, or None.

    When ``node`` is given, a job copying one node's part is only taken by that node; when
    ``local_tier`` is given too, a whole-checkpoint hop out of it (the node-local NVMe, rows
    from before parts) only for checkpoints written on ``node`` (or of unknown node).
    Raises CatalogError when the catalog fails.
    """
    if not dst_tiers:
        return None
    with db.session() as session:
        now = now or lease_clock(session)
        query = skip_locked(_claimable(dst_tiers, now, node, local_tier), session, of=Job)
        job = session.scalars(query.limit(1)).first()
        if job is None:
            return None
        job.state = JobState.RUNNING.value
        job.lease_owner = owner
        job.lease_expires_at = now + timedelta(seconds=lease_seconds)
        return Claim(
            job_id=job.id,
            checkpoint_id=job.checkpoint_id,
            src_tier=job.src_tier,
            dst_tier=job.dst_tier or "",
            priority=job.priority,
            attempts=job.attempts,
            detail=dict(job.detail or {}),
            part_id=job.part_id,
        )


def _claimable(dst_tiers: Collection[str], now: datetime, node: str | None, local_tier: str | None) -> Any:
    query = (
        select(Job)
        .where(
            Job.kind == JobKind.COPY.value,
            Job.dst_tier.in_(list(dst_tiers)),
            or_(
                Job.state == JobState.QUEUED.value,
                and_(Job.state == JobState.RUNNING.value, Job.lease_expires_at < now),
            ),
            or_(Job.not_before.is_(None), Job.not_before <= now),
        )
        .order_by(Job.priority.desc(), Job.checkpoint_id.desc(), Job.id)
    )
    if node is not None:
        # Looked up by key for each queued job: a scan of every part (or checkpoint) ever
        # recorded for each claim grew with the catalog.
        mine = select(Part.id).where(Part.id == Job.part_id, Part.node == node).exists()
        whole: Any = Job.part_id.is_(None)
        if local_tier is not None:
            own = (
                select(Checkpoint.id)
                .where(Checkpoint.id == Job.checkpoint_id, Checkpoint.node.in_([node, ""]))
                .exists()
            )
            whole = and_(whole, or_(Job.src_tier != local_tier, own))
        query = query.where(or_(whole, mine))
    return query


def owned_job(session: Session, job_id: int, owner: str) -> Job | None:
    """The job, locked, if ``owner`` still holds its lease and it is running, else None.

    Locked first, before any replica row: every transaction that changes a running job
    (its start, its progress, its end, a takeover's start) then takes the job's lock before
    the replica's, so two daemons finishing and taking over one job wait instead of
    deadlocking (seen with 32 daemons, a lease expiring under load).
    """
    job = session.get(Job, job_id, with_for_update=True, populate_existing=True)
    if job is None or job.lease_owner != owner or job.state != JobState.RUNNING.value:
        return None
    return job


def renew_lease(
    db: Database, job_id: int, owner: str, *, lease_seconds: float, now: datetime | None = None
) -> bool:
    """Extend the lease; False when this worker no longer holds it (it expired and was taken)."""
    with db.session() as session:
        now = now or lease_clock(session)
        result = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.lease_owner == owner, Job.state == JobState.RUNNING.value)
            .values(lease_expires_at=now + timedelta(seconds=lease_seconds))
        )
        return bool(getattr(result, "rowcount", 0))


def extend_lease(job: Job, lease_seconds: float) -> None:
    """Push a held lease's expiry to ``lease_seconds`` from now (``lease_clock``)."""
    session = object_session(job)
    now = lease_clock(session) if session is not None else utcnow()
    job.lease_expires_at = now + timedelta(seconds=lease_seconds)


def set_job_source(job: Job, src_tier: str) -> None:
    """The tier the job copies from this time."""
    job.src_tier = src_tier


def release_job(db: Database, job_id: int, owner: str, *, bytes_done: int | None = None) -> bool:
    """Put a running job back in the queue, resumable: no attempt counted, replica back to pending.

    The replica keeps ``bytes_done`` (updated first when given). False when the lease
    was no longer ours, in which case nothing is changed.
    """
    with db.session() as session:
        job = owned_job(session, job_id, owner)
        if job is None:
            return False
        _requeue(session, job, bytes_done)
        return True


def requeue_orphaned_jobs(db: Database, node: str, owner: str) -> list[int]:
    """Requeue jobs left ``running`` by an earlier process on ``node``; returns their ids.

    Called at start-up: those processes are gone (one daemon per node), so their
    leases need not run out first.
    """
    with db.session() as session:
        jobs = session.scalars(
            select(Job).where(
                Job.state == JobState.RUNNING.value,
                Job.lease_owner.like(f"{_escape_like(node)}:%", escape="\\"),
                Job.lease_owner != owner,
            )
        ).all()
        for job in jobs:
            _requeue(session, job, None)
        return [job.id for job in jobs]


def _requeue(session: Session, job: Job, bytes_done: int | None) -> None:
    job.state = JobState.QUEUED.value
    job.lease_owner = None
    job.lease_expires_at = None
    if job.dst_tier is not None and job.part_id is not None:
        requeue_copying_part(session, job.part_id, job.dst_tier, bytes_done)
    elif job.dst_tier is not None:
        requeue_copying_replica(session, job.checkpoint_id, job.dst_tier, bytes_done)


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def requeue_failed_jobs(db: Database, reason: str) -> list[int]:
    """Queue again the copy jobs that failed for good with ``detail.reason == reason``.

    Called at start-up for ``permanent`` failures (access denied, missing bucket): a
    restart is when the config or the permissions behind them get fixed.
    """
    with db.session() as session:
        failed = session.scalars(
            select(Job).where(Job.kind == JobKind.COPY.value, Job.state == JobState.FAILED.value)
        ).all()
        ids = []
        for job in failed:
            if (job.detail or {}).get("reason") == reason:
                job.state, job.not_before = JobState.QUEUED.value, None
                ids.append(job.id)
        return ids


def end_job_run(session: Session, job: Job, state: JobState, error: str | None) -> None:
    """End the job's run in ``state``; one that ends for good (done, cancelled) forgets its files."""
    if state in (JobState.DONE, JobState.CANCELLED):
        forget_files_done(session, job)
    job.state = state.value
    job.lease_owner = None
    job.lease_expires_at = None
    job.last_error = error


def cancel_copy_jobs(session: Session, checkpoint_id: int, reason: str) -> int:
    """Cancel the checkpoint's open copy jobs; a running one loses its lease at its next save."""
    jobs = session.scalars(
        select(Job).where(
            Job.checkpoint_id == checkpoint_id, Job.kind == JobKind.COPY.value, Job.state.in_(OPEN_STATES)
        )
    ).all()
    for job in jobs:
        end_job_run(session, job, JobState.CANCELLED, reason)
    return len(jobs)


def fail_job_run(session: Session, job: Job, error: str, *, reason: str, retry_at: datetime | None) -> None:
    """Count a failed attempt (its ``reason`` kept in the detail).

    The job is queued again at ``retry_at``, or failed for good when that is None.
    """
    job.attempts += 1
    job.detail = {**(job.detail or {}), "reason": reason}
    if retry_at is None:
        end_job_run(session, job, JobState.FAILED, error)
    else:
        end_job_run(session, job, JobState.QUEUED, error)
        job.not_before = retry_at


def open_copy_hops(session: Session, checkpoint_ids: Sequence[int]) -> set[tuple[int, str]]:
    """(checkpoint id, destination tier) of every whole-checkpoint copy job in OPEN_STATES."""
    return {
        (checkpoint_id, dst or "")
        for checkpoint_id, dst in session.execute(
            select(Job.checkpoint_id, Job.dst_tier).where(
                Job.checkpoint_id.in_(checkpoint_ids),
                Job.kind == JobKind.COPY.value,
                Job.state.in_(OPEN_STATES),
                Job.part_id.is_(None),
            )
        )
    }


def open_part_hops(session: Session, checkpoint_ids: Sequence[int]) -> set[tuple[int, str, int]]:
    """(checkpoint id, destination tier, part id) of every one-part copy job in OPEN_STATES."""
    return {
        (checkpoint_id, dst or "", part_id or 0)
        for checkpoint_id, dst, part_id in session.execute(
            select(Job.checkpoint_id, Job.dst_tier, Job.part_id).where(
                Job.checkpoint_id.in_(checkpoint_ids),
                Job.kind == JobKind.COPY.value,
                Job.state.in_(OPEN_STATES),
                Job.part_id.is_not(None),
            )
        )
    }
