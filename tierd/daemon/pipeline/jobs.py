"""Copy jobs in the catalog: enqueue, claim under a lease, renew, release, requeue.

A job is claimable when it is ``queued`` (and its ``not_before`` has passed) or when it is
``running`` under a lease that has expired (its worker died). On PostgreSQL the claim
uses ``SELECT ... FOR UPDATE SKIP LOCKED`` so workers on many nodes never wait for each
other or take the same job; on SQLite the write transaction (BEGIN IMMEDIATE) already
serialises claimers. Every change to a running job is conditional on its lease owner,
so a worker that lost its lease cannot overwrite the new owner's work.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import (
    Checkpoint,
    Job,
    JobKind,
    JobState,
    Replica,
    ReplicaState,
    utcnow,
)

__all__ = [
    "OPEN_STATES",
    "Claim",
    "claim",
    "enqueue_copy",
    "owner_id",
    "release",
    "renew",
    "requeue_failed",
    "requeue_orphans",
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


def owner_id(node: str, pid: int | None = None) -> str:
    """The lease owner name of this process: ``node:pid``."""
    return f"{node}:{pid if pid is not None else os.getpid()}"


def enqueue_copy(session: Session, checkpoint_id: int, src: str, dst: str, priority: int) -> Job:
    """Add a queued copy job for one hop (inside the caller's transaction)."""
    job = Job(
        kind=JobKind.COPY.value,
        checkpoint_id=checkpoint_id,
        src_tier=src,
        dst_tier=dst,
        state=JobState.QUEUED.value,
        priority=priority,
        detail={},
    )
    session.add(job)
    return job


def claim(
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

    When ``node`` and ``local_tier`` are given, hops whose source is ``local_tier`` (the
    node-local NVMe) are only taken for checkpoints written on ``node`` (or of unknown node).
    """
    if not dst_tiers:
        return None
    now = now or utcnow()
    with db.session() as session:
        query = _claimable(dst_tiers, now, node, local_tier)
        if not db.is_sqlite:
            query = query.with_for_update(skip_locked=True, of=Job)
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
    if node is not None and local_tier is not None:
        query = query.join(Checkpoint, Checkpoint.id == Job.checkpoint_id).where(
            or_(Job.src_tier != local_tier, Checkpoint.node.in_([node, ""]))
        )
    return query


def renew(
    db: Database, job_id: int, owner: str, *, lease_seconds: float, now: datetime | None = None
) -> bool:
    """Extend the lease; False when this worker no longer holds it (it expired and was taken)."""
    now = now or utcnow()
    with db.session() as session:
        result = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.lease_owner == owner, Job.state == JobState.RUNNING.value)
            .values(lease_expires_at=now + timedelta(seconds=lease_seconds))
        )
        return bool(getattr(result, "rowcount", 0))


def release(db: Database, job_id: int, owner: str, *, bytes_done: int | None = None) -> bool:
    """Put a running job back in the queue, resumable: no attempt counted, replica back to pending.

    The replica keeps ``bytes_done`` (updated first when given). False when the lease
    was no longer ours, in which case nothing is changed.
    """
    with db.session() as session:
        job = session.get(Job, job_id)
        if job is None or job.lease_owner != owner or job.state != JobState.RUNNING.value:
            return False
        _requeue(session, job, bytes_done)
        return True


def requeue_orphans(db: Database, node: str, owner: str) -> list[int]:
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
    replica = session.scalars(
        select(Replica).where(Replica.checkpoint_id == job.checkpoint_id, Replica.tier == job.dst_tier)
    ).one_or_none()
    if replica is not None and replica.state == ReplicaState.COPYING.value:
        replica.state = ReplicaState.PENDING.value
        if bytes_done is not None:
            replica.bytes_done = bytes_done


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def requeue_failed(db: Database, reason: str) -> list[int]:
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
