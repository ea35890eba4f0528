"""Legal holds on the store's objects (S3 Object Lock): which replicas need theirs set, and recording it.

A replica's objects should carry the legal hold ON while its checkpoint has any hold in
the catalog, and OFF once the last is released. ``store_hold`` records what was last set
and ``store_hold_at`` when, so a pass sends nothing for a replica already as it should be.
A replica verified after its hold was set (copied again: new objects, without it) is due
again; so is a replica copied after the hold was placed (``store_hold`` still NULL).
A replica never held is never sent anything (NULL means OFF on the store).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, exists, false, or_, select, true, update
from sqlalchemy.orm import Session

from tierd.daemon.catalog.audit import append_event
from tierd.daemon.catalog.models import Hold, Replica, ReplicaState, utcnow
from tierd.daemon.catalog.replica_deletions import checkpoint_files

__all__ = ["StoreHoldDue", "record_store_hold", "store_holds_due"]


@dataclass(frozen=True)
class StoreHoldDue:
    """A replica whose objects' legal hold must be set to ``on``."""

    replica_id: int
    checkpoint_id: int
    tier: str
    on: bool
    #: The replica's ``verified_at`` when read: recorded only if it is still that.
    verified_at: datetime | None
    relpaths: list[str]


def store_holds_due(session: Session, tier: str, limit: int) -> list[StoreHoldDue]:
    """Up to ``limit`` replicas on ``tier`` whose store hold differs from the catalog's holds.

    ON for verified replicas; OFF for verified ones and those being deleted.
    """
    held = exists().where(Hold.checkpoint_id == Replica.checkpoint_id)
    set_on = Replica.store_hold.is_(true())
    stale = or_(Replica.store_hold_at.is_(None), Replica.store_hold_at < Replica.verified_at)
    verified = Replica.state == ReplicaState.VERIFIED.value
    # a released replica already scheduled for deletion is cleared too: tierd's delete only adds
    # a delete marker in a versioned bucket, and the version under it would stay held for good
    clearable = Replica.state.in_([ReplicaState.VERIFIED.value, ReplicaState.DELETING.value])
    query = (
        select(Replica.id, Replica.checkpoint_id, held, Replica.verified_at)
        .where(Replica.tier == tier)
        .where(
            or_(
                and_(verified, held, or_(~set_on, Replica.store_hold.is_(None), stale)),
                and_(clearable, ~held, set_on),
            )
        )
        .order_by(Replica.id)
        .limit(limit)
    )
    rows = session.execute(query).all()
    return [
        StoreHoldDue(replica, checkpoint, tier, bool(on), verified_at, _relpaths(session, checkpoint))
        for replica, checkpoint, on, verified_at in rows
    ]


def _relpaths(session: Session, checkpoint_id: int) -> list[str]:
    return [relpath for relpath, _, _ in checkpoint_files(session, checkpoint_id)]


def record_store_hold(session: Session, due: StoreHoldDue, *, actor: str) -> bool:
    """Record that ``due.on`` was set on every object, with its audit event.

    False (nothing recorded) when the replica was verified again, or is gone, since it was read.
    """
    verified = (
        Replica.verified_at.is_(None) if due.verified_at is None else Replica.verified_at == due.verified_at
    )
    result = session.execute(
        update(Replica)
        .where(Replica.id == due.replica_id, verified)
        .values(store_hold=true() if due.on else false(), store_hold_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    if not result.rowcount:  # type: ignore[attr-defined]
        return False
    append_event(
        session,
        actor=actor,
        action="store_hold" if due.on else "store_release",
        checkpoint_id=due.checkpoint_id,
        tier=due.tier,
        reason="the catalog's legal holds, set on the store's objects",
        detail={"legal_hold": "ON" if due.on else "OFF", "objects": len(due.relpaths)},
    )
    return True
