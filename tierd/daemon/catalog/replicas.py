"""Replicas: a checkpoint's copy on one tier, its state, location and bytes copied.

The functions taking a ``Replica`` change the loaded row; the caller's transaction
writes it at commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from tierd.daemon.catalog.models import PartReplica, Replica, ReplicaState, utcnow

__all__ = [
    "GONE",
    "NEEDS_COPY",
    "add_first_replicas",
    "add_pending_replica",
    "find_replica",
    "first_tier_replica",
    "mark_replica_copying",
    "mark_replica_deleted",
    "mark_replica_failed",
    "mark_replica_verified",
    "replicas_by_tier",
    "requeue_copying_part",
    "requeue_copying_replica",
]

#: Replica states that mean "this tier still needs a copy".
NEEDS_COPY = frozenset({ReplicaState.PENDING.value, ReplicaState.FAILED.value, ReplicaState.COPYING.value})
#: Replica states of a copy that is gone, or going.
GONE = frozenset({ReplicaState.DELETED.value, ReplicaState.DELETING.value})


def find_replica(session: Session, checkpoint_id: int, tier: str) -> Replica | None:
    """The checkpoint's replica on ``tier``, or None."""
    return session.scalars(
        select(Replica).where(Replica.checkpoint_id == checkpoint_id, Replica.tier == tier)
    ).one_or_none()


def replicas_by_tier(session: Session, checkpoint_id: int) -> dict[str, Replica]:
    """Every replica of the checkpoint, by tier name."""
    return {r.tier: r for r in session.scalars(select(Replica).where(Replica.checkpoint_id == checkpoint_id))}


def first_tier_replica(session: Session, checkpoint_id: int) -> Replica | None:
    """The checkpoint's replica on tier 0 (where it was written), or None."""
    return session.scalars(
        select(Replica).where(Replica.checkpoint_id == checkpoint_id, Replica.tier_index == 0)
    ).one_or_none()


def add_pending_replica(session: Session, checkpoint_id: int, tier: str, tier_index: int) -> None:
    """Add a ``pending`` replica row for a tier the checkpoint has none on."""
    state = ReplicaState.PENDING.value
    session.add(Replica(checkpoint_id=checkpoint_id, tier=tier, tier_index=tier_index, state=state))


def add_first_replicas(
    session: Session, checkpoint_id: int, tiers: Sequence[str], *, location: str, verified_at: datetime
) -> None:
    """A just-recorded checkpoint's replicas: verified at ``location`` on tier 0, pending on the rest."""
    for index, tier in enumerate(tiers):
        first = index == 0
        session.add(
            Replica(
                checkpoint_id=checkpoint_id,
                tier=tier,
                tier_index=index,
                state=(ReplicaState.VERIFIED if first else ReplicaState.PENDING).value,
                location=location if first else "",
                verified_at=verified_at if first else None,
            )
        )


def mark_replica_copying(replica: Replica) -> None:
    """A hop into the replica's tier has started."""
    replica.state, replica.error = ReplicaState.COPYING.value, None


def mark_replica_verified(replica: Replica, location: str, total_bytes: int) -> None:
    """Every file matched its checksum on the replica's tier: verified now, at ``location``."""
    replica.state, replica.error, replica.verified_at = ReplicaState.VERIFIED.value, None, utcnow()
    replica.location, replica.bytes_done = location, total_bytes


def mark_replica_failed(replica: Replica, error: str) -> None:
    """The hop into the replica's tier failed with ``error``."""
    replica.state, replica.error = ReplicaState.FAILED.value, error


def mark_replica_deleted(replica: Replica) -> None:
    """The replica's bytes are gone from its tier."""
    replica.state = ReplicaState.DELETED.value


def requeue_copying_part(session: Session, part_id: int, tier: str, bytes_done: int | None) -> None:
    """A part's copy given back to the queue: ``copying`` goes back to ``pending``."""
    row = session.scalars(
        select(PartReplica).where(PartReplica.part_id == part_id, PartReplica.tier == tier)
    ).one_or_none()
    if row is not None and row.state == ReplicaState.COPYING.value:
        row.state = ReplicaState.PENDING.value
        if bytes_done is not None:
            row.bytes_done = bytes_done


def requeue_copying_replica(session: Session, checkpoint_id: int, tier: str, bytes_done: int | None) -> None:
    """A copy given back to the queue: ``copying`` goes back to ``pending``, with ``bytes_done`` if given."""
    replica = find_replica(session, checkpoint_id, tier)
    if replica is not None and replica.state == ReplicaState.COPYING.value:
        replica.state = ReplicaState.PENDING.value
        if bytes_done is not None:
            replica.bytes_done = bytes_done
