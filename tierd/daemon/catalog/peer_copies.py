"""Each part's copies on other nodes' peer tiers, and when a step became safe against one node's loss.

A step is **safe against one node's loss** when every part of it is verified somewhere other
than the node that wrote it: a peer copy verified on another node (``peer_copies``), or the
part (or the whole step) verified on a shared tier. It became so at the latest of its parts'
earliest such times.

The sending side asks ``parts_to_send`` which of its node's parts still lack copies, and
``interrupt_copies`` at start-up turns the copies it was making when it stopped into
``failed`` (they are made again: a copy is ``verified`` only once every file reached its holder).
A part is sent once recorded, its step waiting or complete; a part that grows afterwards (the
format's marker, or a late rank's file, landed beside it) has its copies ``reopen``ed to
``pending``: its holders hold its earlier files and get the new ones (``settle_copy`` verifies
a copy only when it took every file the part has at that moment).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, exists, func, or_, select, update
from sqlalchemy.orm import Session

from tierd.daemon.catalog.dialect import insert_or_update
from tierd.daemon.catalog.models import (
    Checkpoint,
    CheckpointState,
    File,
    Hold,
    Part,
    PartReplica,
    PeerCopy,
    Replica,
    ReplicaState,
    Run,
    utcnow,
)

__all__ = [
    "LOOK_BACK",
    "CopyToDrop",
    "HeldCopy",
    "PartToSend",
    "copies_to_drop",
    "held_copies",
    "interrupt_copies",
    "write_off_copies",
    "mark_peer_copy",
    "newest_safe_created_at",
    "parts_to_send",
    "peer_copies_of",
    "reopen_copies",
    "safe_since",
    "settle_copy",
]

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


@dataclass(frozen=True)
class PartToSend:
    """A part of this node that lacks peer copies: its step, and who holds a verified copy already."""

    part_id: int
    checkpoint_id: int
    run: str
    step: int
    holders: tuple[str, ...]
    #: Nodes whose copy of the part was dropped or evicted: tried after the others.
    passed: tuple[str, ...] = ()
    #: Nodes holding the part's files as they were before it grew (``pending``): tried first.
    earlier: tuple[str, ...] = ()


def parts_to_send(
    session: Session,
    node: str,
    replicas: int,
    shared_tiers: Collection[str],
    keep_last: int | None,
    limit: int = 64,
) -> list[PartToSend]:
    """``node``'s recorded parts with fewer than ``replicas`` verified copies on other nodes.

    A part goes once recorded, its step complete or still waiting for other nodes' parts:
    a node's part is at risk from the moment it lands, not from the step's last part.
    Newest step first, at most ``limit``. Left out: a part verified on a shared tier (or
    whose whole step is), and, with ``keep_last``, a step not among its run's newest
    ``keep_last`` complete steps (the peer tier's retention would drop it at once), and a
    step whose deletion is scheduled on this node's own tiers (``_leaving``: its files go,
    and a send of them failed "not found" and was retried until the step was ``deleted``).
    """
    live = [CheckpointState.COMPLETE.value, CheckpointState.WAITING.value]
    copies = (
        select(func.count())
        .where(PeerCopy.part_id == Part.id, PeerCopy.holder != node)
        .where(PeerCopy.state == ReplicaState.VERIFIED.value)
        .scalar_subquery()
    )
    query = (
        select(Part.id, Part.checkpoint_id, Run.name, Checkpoint.step)
        .join(Checkpoint, Checkpoint.id == Part.checkpoint_id)
        .join(Run, Run.id == Checkpoint.run_id)
        .where(Part.node == node, Checkpoint.state.in_(live), copies < replicas)
        .where(~_on_shared(shared_tiers), ~_leaving(shared_tiers))
        .order_by(Checkpoint.created_at.desc(), Part.id.desc())
        .limit(limit)
    )
    if keep_last is not None:
        query = query.where(_newer_complete_steps() < keep_last)
    rows = session.execute(query).all()
    ids = [r[0] for r in rows]
    held, passed, earlier = (
        _holders(session, ids, node, state)
        for state in (ReplicaState.VERIFIED, ReplicaState.DELETED, ReplicaState.PENDING)
    )
    return [PartToSend(*r, *(tuple(by.get(r[0], ())) for by in (held, passed, earlier))) for r in rows]


def _newer_complete_steps() -> ColumnElement[int]:
    """How many complete steps of the outer query's run are newer than its checkpoint."""
    newer = Checkpoint.__table__.alias("newer")
    return (
        select(func.count())
        .where(newer.c.run_id == Checkpoint.run_id, newer.c.state == CheckpointState.COMPLETE.value)
        .where(newer.c.step > Checkpoint.step)
        .scalar_subquery()
    )


def _on_shared(shared_tiers: Collection[str]) -> ColumnElement[bool]:
    """Whether the part of the outer query (or its whole step) is verified on a shared tier."""
    verified, shared = ReplicaState.VERIFIED.value, list(shared_tiers)
    part = exists().where(
        PartReplica.part_id == Part.id, PartReplica.state == verified, PartReplica.tier.in_(shared)
    )
    whole = exists().where(
        Replica.checkpoint_id == Part.checkpoint_id, Replica.state == verified, Replica.tier.in_(shared)
    )
    return or_(part, whole)


def _leaving(shared_tiers: Collection[str]) -> ColumnElement[bool]:
    """Whether the outer query's step is deleting (or deleted) on every node-local tier it is on."""
    gone, shared = [ReplicaState.DELETING.value, ReplicaState.DELETED.value], list(shared_tiers)
    own = (Replica.checkpoint_id == Part.checkpoint_id, Replica.tier.not_in(shared))
    return exists().where(*own, Replica.state.in_(gone)) & ~exists().where(*own, Replica.state.not_in(gone))


def _holders(session: Session, part_ids: list[int], node: str, state: ReplicaState) -> dict[int, list[str]]:
    """The nodes other than ``node`` whose copy of each part is in ``state``, by name."""
    found: dict[int, list[str]] = {}
    if not part_ids:
        return found
    rows = session.execute(
        select(PeerCopy.part_id, PeerCopy.holder)
        .where(
            PeerCopy.part_id.in_(part_ids),
            PeerCopy.state == state.value,
            PeerCopy.holder != node,
        )
        .order_by(PeerCopy.holder)
    )
    for part_id, holder in rows:
        found.setdefault(part_id, []).append(holder)
    return found


def interrupt_copies(session: Session, node: str) -> int:
    """Turn the copies of ``node``'s parts left ``copying`` or ``pending`` into ``failed``; how many.

    Run by the sender at start: what it was sending when it stopped is sent again, whole.
    """
    mine = select(Part.id).where(Part.node == node)
    result = session.execute(
        update(PeerCopy)
        .where(
            PeerCopy.part_id.in_(mine),
            PeerCopy.state.in_([ReplicaState.COPYING.value, ReplicaState.PENDING.value]),
        )
        .values(state=ReplicaState.FAILED.value, error="interrupted: the sender stopped", updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def reopen_copies(session: Session, part_id: int) -> int:
    """Turn the part's ``verified`` and ``copying`` copies into ``pending``: it grew; how many.

    Their holders keep the files they took, and get the part's new ones from its sender.
    """
    result = session.execute(
        update(PeerCopy)
        .where(
            PeerCopy.part_id == part_id,
            PeerCopy.state.in_([ReplicaState.VERIFIED.value, ReplicaState.COPYING.value]),
        )
        .values(
            state=ReplicaState.PENDING.value,
            verified_at=None,
            error="the part grew: its new files are to be sent",
            updated_at=utcnow(),
        )
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def settle_copy(session: Session, part_id: int, holder: str, files: int) -> bool:
    """Record ``holder``'s copy ``verified`` now, if it took all ``files`` the part has; whether it did.

    A part that grew while it was being sent (more files than ``files`` now, or its copy
    reopened meanwhile) leaves the copy ``pending``: the new files are sent next.
    """
    now = utcnow()
    count = session.scalar(select(func.count()).select_from(File).where(File.part_id == part_id))
    mine = (PeerCopy.part_id == part_id) & (PeerCopy.holder == holder)
    if count != files:
        reopened = {"state": ReplicaState.PENDING.value, "verified_at": None, "updated_at": now}
        session.execute(
            update(PeerCopy).where(mine).values(**reopened).execution_options(synchronize_session=False)
        )
        return False
    result = session.execute(
        update(PeerCopy)
        .where(mine, PeerCopy.state == ReplicaState.COPYING.value)
        .values(state=ReplicaState.VERIFIED.value, verified_at=now, error=None, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0) == 1


@dataclass(frozen=True)
class CopyToDrop:
    """A copy of this node's part that its holder should no longer keep, and why."""

    part_id: int
    checkpoint_id: int
    holder: str
    reason: str


def copies_to_drop(
    session: Session,
    node: str,
    durable_shared: Collection[str],
    keep_last: int | None,
    limit: int = 256,
) -> list[CopyToDrop]:
    """Copies of ``node``'s parts whose holders should remove them, oldest step first.

    - ``failed``: a copy that did not complete (what its holder took of it);
    - ``durable``: verified, and the part (or its whole step) is verified on a durable shared
      tier, pinned or held or not: that copy protects the step from now on;
    - ``retention``: verified, the step is not among its run's newest ``keep_last`` complete
      steps, nor pinned, nor held; or the step is gone (``deleted``) or changed. A step still
      waiting for other nodes' parts is kept (an abandoned one goes once ``keep_last`` newer
      steps are complete).
    """
    verified, failed = ReplicaState.VERIFIED.value, ReplicaState.FAILED.value
    live = [CheckpointState.COMPLETE.value, CheckpointState.WAITING.value]
    reasons: list[tuple[str, ColumnElement[bool]]] = [
        ("failed", PeerCopy.state == failed),
        ("durable", (PeerCopy.state == verified) & _on_shared(durable_shared)),
    ]
    gone: ColumnElement[bool] = Checkpoint.state.not_in(live)
    if keep_last is not None:
        kept = Checkpoint.pinned | exists().where(Hold.checkpoint_id == Checkpoint.id)
        gone = gone | ((_newer_complete_steps() >= keep_last) & ~kept)
    reasons.append(("retention", (PeerCopy.state == verified) & gone))
    found: dict[tuple[int, str], CopyToDrop] = {}
    for reason, condition in reasons:
        rows = session.execute(
            select(Part.id, Part.checkpoint_id, PeerCopy.holder)
            .join(PeerCopy, PeerCopy.part_id == Part.id)
            .join(Checkpoint, Checkpoint.id == Part.checkpoint_id)
            .where(Part.node == node, condition)
            .order_by(Checkpoint.created_at, Part.id)
            .limit(limit)
        )
        for part_id, checkpoint_id, holder in rows:
            found.setdefault((part_id, holder), CopyToDrop(part_id, checkpoint_id, holder, reason))
    return list(found.values())


def write_off_copies(session: Session, node: str, live: Collection[str]) -> list[tuple[int, str]]:
    """Turn verified copies of ``node``'s parts held by a node not in ``live`` into ``failed``.

    A dead holder's copy keeps no step safe: the part is sent to the next node, and what
    the holder kept is dropped once it is back. Returns ``(checkpoint id, holder)`` of each.
    """
    rows = session.execute(
        select(PeerCopy, Part.checkpoint_id)
        .join(Part, Part.id == PeerCopy.part_id)
        .where(
            Part.node == node,
            PeerCopy.state == ReplicaState.VERIFIED.value,
            PeerCopy.holder.not_in(list(live)),
        )
    ).all()
    for copy, _ in rows:
        copy.state, copy.verified_at = ReplicaState.FAILED.value, None
        copy.error = f"written off: holder {copy.holder} not heard from"
    return [(checkpoint_id, copy.holder) for copy, checkpoint_id in rows]


@dataclass(frozen=True)
class HeldCopy:
    """A copy this node holds of another node's part: whose, of which step, how big, safe elsewhere."""

    part_id: int
    node: str
    checkpoint_id: int
    bytes: int
    safe_elsewhere: bool


def held_copies(
    session: Session, holder: str, shared_tiers: Collection[str], limit: int = 1000
) -> list[HeldCopy]:
    """The verified copies ``holder`` holds, in the order disk pressure evicts them.

    Those whose part is safe without this copy first (verified on a shared tier, or on a
    third node), then the rest; oldest step first within each.
    """
    verified = ReplicaState.VERIFIED.value
    other = PeerCopy.__table__.alias("other")
    on_third = exists().where(
        other.c.part_id == Part.id,
        other.c.state == verified,
        other.c.holder != holder,
        other.c.holder != Part.node,
    )
    elsewhere = or_(on_third, _on_shared(shared_tiers))
    rows = session.execute(
        select(Part.id, Part.node, Part.checkpoint_id, Part.total_bytes, elsewhere)
        .join(PeerCopy, PeerCopy.part_id == Part.id)
        .join(Checkpoint, Checkpoint.id == Part.checkpoint_id)
        .where(PeerCopy.holder == holder, PeerCopy.state == verified)
        .order_by(elsewhere.desc(), Checkpoint.created_at, Part.id)
        .limit(limit)
    )
    return [HeldCopy(r[0], r[1], r[2], r[3], bool(r[4])) for r in rows]
