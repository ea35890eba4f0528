"""Each part's copies on other nodes' peer tiers, and when a step became safe against one node's loss.

A step is **safe against one node's loss** when every part of it is verified somewhere other
than the node that wrote it: a peer copy verified on another node (``peer_copies``), or the
part (or the whole step) verified on a shared tier. It became so at the latest of its parts'
earliest such times.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tierd.daemon.catalog.dialect import insert_or_update
from tierd.daemon.catalog.models import (
    Checkpoint,
    CheckpointState,
    Part,
    PartReplica,
    PeerCopy,
    Replica,
    ReplicaState,
    utcnow,
)

__all__ = ["LOOK_BACK", "mark_peer_copy", "newest_safe_created_at", "peer_copies_of", "safe_since"]

#: How many of the newest complete steps ``newest_safe_created_at`` looks at (a scrape's bound).
LOOK_BACK = 32

_COPIES = PeerCopy.metadata.tables[PeerCopy.__tablename__]


def mark_peer_copy(
    session: Session, part_id: int, holder: str, state: ReplicaState, error: str | None = None
) -> None:
    """Record that ``holder`` holds (or is getting, or failed to take) the part's copy in ``state``.

    ``verified`` stamps ``verified_at`` now; any other state clears it.
    """
    now = utcnow()
    values = {
        "part_id": part_id,
        "holder": holder,
        "state": state.value,
        "verified_at": now if state is ReplicaState.VERIFIED else None,
        "error": error,
        "updated_at": now,
    }
    session.execute(insert_or_update(session, _COPIES, ("part_id", "holder"), values))


def peer_copies_of(session: Session, checkpoint_id: int) -> list[tuple[str, str, str]]:
    """``(node, holder, state)`` of every peer copy of the checkpoint's parts, by node then holder."""
    rows = session.execute(
        select(Part.node, PeerCopy.holder, PeerCopy.state)
        .join(PeerCopy, PeerCopy.part_id == Part.id)
        .where(Part.checkpoint_id == checkpoint_id)
        .order_by(Part.node, PeerCopy.holder)
    )
    return [(r.node, r.holder, r.state) for r in rows]


def safe_since(session: Session, checkpoint_id: int, shared_tiers: Collection[str]) -> datetime | None:
    """When the step became safe against one node's loss; None while it is not."""
    verified = ReplicaState.VERIFIED.value
    whole = session.scalar(
        select(func.min(Replica.verified_at)).where(
            Replica.checkpoint_id == checkpoint_id,
            Replica.tier.in_(list(shared_tiers)),
            Replica.state == verified,
        )
    )
    parts = session.scalars(select(Part.id).where(Part.checkpoint_id == checkpoint_id)).all()
    if not parts:
        return whole
    on_peers = (
        select(PeerCopy.part_id.label("part_id"), PeerCopy.verified_at.label("at"))
        .join(Part, Part.id == PeerCopy.part_id)
        .where(PeerCopy.state == verified, PeerCopy.holder != Part.node)
    )
    on_shared = select(PartReplica.part_id, PartReplica.verified_at).where(
        PartReplica.state == verified, PartReplica.tier.in_(list(shared_tiers))
    )
    elsewhere = on_peers.union_all(on_shared).subquery()
    rows = session.execute(
        select(elsewhere.c.part_id, func.min(elsewhere.c.at))
        .where(elsewhere.c.part_id.in_(parts))
        .group_by(elsewhere.c.part_id)
    )
    earliest: dict[int, datetime | None] = {part_id: at for part_id, at in rows}
    if len(earliest) < len(parts) or any(at is None for at in earliest.values()):
        return whole
    parts_safe = max(at for at in earliest.values() if at is not None)
    return parts_safe if whole is None else min(parts_safe, whole)


def newest_safe_created_at(
    session: Session, shared_tiers: Collection[str], look_back: int = LOOK_BACK
) -> datetime | None:
    """When the newest complete step safe against one node's loss was created, among the newest ``look_back``.

    None when none of them is safe (the recovery point for "one node lost" is older, or absent).
    """
    newest = session.execute(
        select(Checkpoint.id, Checkpoint.created_at)
        .where(Checkpoint.state == CheckpointState.COMPLETE.value)
        .order_by(Checkpoint.created_at.desc(), Checkpoint.id.desc())
        .limit(look_back)
    )
    for checkpoint_id, created_at in newest.all():
        if safe_since(session, checkpoint_id, shared_tiers) is not None:
            return created_at
    return None
