"""Totals over the catalog for the metrics scrape: replicas, verified bytes, pins, holds, jobs, waits."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select

from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import (
    Checkpoint,
    CheckpointState,
    Hold,
    Job,
    JobState,
    Replica,
    ReplicaState,
)

__all__ = ["ReplicaStats", "TierVerified", "WorkStats", "replica_stats", "work_stats"]


@dataclass(frozen=True)
class TierVerified:
    """The checkpoints verified on one tier: the newest one's creation time and their bytes."""

    tier: str
    newest_created_at: datetime | None
    total_bytes: int


@dataclass(frozen=True)
class ReplicaStats:
    """Replica counts by (tier, state), and what each tier holds verified."""

    counts: dict[tuple[str, str], int]
    verified: list[TierVerified]
    pinned: int = 0
    held: int = 0


def replica_stats(db: Database) -> ReplicaStats:
    """Both totals, read in one read-only transaction; raises CatalogError when the catalog fails."""
    with db.read_session() as session:
        counts = session.execute(
            select(Replica.tier, Replica.state, func.count()).group_by(Replica.tier, Replica.state)
        ).all()
        newest = session.execute(
            select(Replica.tier, func.max(Checkpoint.created_at), func.sum(Checkpoint.total_bytes))
            .join(Checkpoint, Checkpoint.id == Replica.checkpoint_id)
            .where(Replica.state == ReplicaState.VERIFIED.value)
            .group_by(Replica.tier)
        ).all()
        pinned = session.scalar(select(func.count()).select_from(Checkpoint).where(Checkpoint.pinned))
        held = session.scalar(select(func.count(func.distinct(Hold.checkpoint_id))))
    return ReplicaStats(
        counts={(tier, state): n for tier, state, n in counts},
        verified=[TierVerified(tier, created, int(total or 0)) for tier, created, total in newest],
        pinned=int(pinned or 0),
        held=int(held or 0),
    )


@dataclass(frozen=True)
class WorkStats:
    """The fleet's work: jobs queued or running, and steps waiting for files or a node's part.

    ``jobs`` is keyed by (kind, state, destination tier or ""); ``oldest_waiting_since`` is
    when the step waiting longest began to wait.
    """

    jobs: dict[tuple[str, str, str], int]
    waiting: int
    oldest_waiting_since: datetime | None


def work_stats(db: Database) -> WorkStats:
    """Both, in one read-only transaction; raises CatalogError when the catalog fails.

    The jobs' claim index (state first) and the waiting steps' partial index serve them.
    """
    unfinished = (JobState.QUEUED.value, JobState.RUNNING.value)
    with db.read_session() as session:
        jobs = session.execute(
            select(Job.kind, Job.state, Job.dst_tier, func.count())
            .where(Job.state.in_(unfinished))
            .group_by(Job.kind, Job.state, Job.dst_tier)
        ).all()
        waiting, oldest = session.execute(
            select(func.count(), func.min(Checkpoint.waiting_since)).where(
                Checkpoint.state == CheckpointState.WAITING.value
            )
        ).one()
    return WorkStats(
        jobs={(kind, state, tier or ""): n for kind, state, tier, n in jobs},
        waiting=int(waiting or 0),
        oldest_waiting_since=oldest,
    )
