"""Totals over the catalog for the metrics scrape: replicas by tier and state, verified data, pins, holds."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select

from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, Hold, Replica, ReplicaState

__all__ = ["ReplicaStats", "TierVerified", "replica_stats"]


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
