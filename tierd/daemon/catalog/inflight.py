"""What is in flight on the node's catalog: copy jobs queued or running, replicas being deleted."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from tierd.daemon.catalog.models import Checkpoint, Job, JobKind, JobState, Replica, ReplicaState, Run

__all__ = ["CopyInFlight", "DeletionInFlight", "copies_in_flight", "deletions_in_flight"]


@dataclass(frozen=True)
class CopyInFlight:
    """A copy job queued or running, with how far its destination replica has got."""

    id: int
    checkpoint_id: int
    run: str
    step: int
    src_tier: str | None
    dst_tier: str | None
    state: str
    attempts: int
    bytes_done: int
    bytes_total: int
    error: str | None


@dataclass(frozen=True)
class DeletionInFlight:
    """A replica in ``deleting``."""

    checkpoint_id: int
    run: str
    step: int
    tier: str
    delete_after: datetime | None
    reason: str | None


def copies_in_flight(session: Session, limit: int = 1000) -> list[CopyInFlight]:
    """Copy jobs queued or running, running first, then by priority (newest checkpoints first)."""
    query = (
        select(
            Job.id,
            Job.checkpoint_id,
            Run.name,
            Checkpoint.step,
            Job.src_tier,
            Job.dst_tier,
            Job.state,
            Job.attempts,
            Replica.bytes_done,
            Checkpoint.total_bytes,
            Job.last_error,
        )
        .join(Checkpoint, Checkpoint.id == Job.checkpoint_id)
        .join(Run, Run.id == Checkpoint.run_id)
        .outerjoin(Replica, and_(Replica.checkpoint_id == Job.checkpoint_id, Replica.tier == Job.dst_tier))
        .where(Job.kind == JobKind.COPY.value, Job.state.in_([JobState.QUEUED.value, JobState.RUNNING.value]))
        .order_by(Job.state.desc(), Job.priority.desc(), Job.id)
        .limit(limit)
    )
    return [
        CopyInFlight(i, c, r, s, src, dst, st, a, done or 0, total, err)
        for i, c, r, s, src, dst, st, a, done, total, err in session.execute(query)
    ]


def deletions_in_flight(session: Session, limit: int = 1000) -> list[DeletionInFlight]:
    """Replicas in ``deleting``, soonest first."""
    query = (
        select(
            Replica.checkpoint_id,
            Run.name,
            Checkpoint.step,
            Replica.tier,
            Replica.delete_after,
            Replica.delete_reason,
        )
        .join(Checkpoint, Checkpoint.id == Replica.checkpoint_id)
        .join(Run, Run.id == Checkpoint.run_id)
        .where(Replica.state == ReplicaState.DELETING.value)
        .order_by(Replica.delete_after, Replica.checkpoint_id)
        .limit(limit)
    )
    return [DeletionInFlight(*row) for row in session.execute(query)]
