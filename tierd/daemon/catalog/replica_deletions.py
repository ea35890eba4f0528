"""Two-phase deletion of replicas: scheduled (``deleting`` + ``delete_after``), begun, done.

A replica's life on the way out::

    verified ──schedule──▶ deleting, delete_after=T ──begin (T passed)──▶ deleting, delete_after=None
        ▲                         │                                              │
        └──────── undelete ───────┘                               finish ──▶ deleted

``begin`` is a conditional update, so an undelete and the deleter cannot both win; a
deletion that has begun is finished after a crash (deleting is idempotent). Every step
writes its audit event in the same transaction.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, exists, insert, select, update
from sqlalchemy.orm import Session

from tierd.daemon.catalog.audit import append_event
from tierd.daemon.catalog.jobs import cancel_copy_jobs
from tierd.daemon.catalog.models import (
    AuditEvent,
    Checkpoint,
    CheckpointState,
    File,
    Hold,
    Part,
    Replica,
    ReplicaState,
    Run,
    utcnow,
)
from tierd.daemon.catalog.part_replicas import set_part_copies
from tierd.daemon.catalog.protection import checkpoint_for_update, give_back
from tierd.daemon.catalog.replicas import find_replica
from tierd.errors import Conflict

__all__ = [
    "DeletionContext",
    "DueDeletion",
    "Origin",
    "abandon_deletion",
    "refuse_deletion",
    "begin_deletion",
    "cancel_deletion",
    "cancel_retention_deletion",
    "checkpoint_files",
    "deletion_context",
    "due_deletions",
    "finish_deletion",
    "schedule_checkpoint_deletion",
    "Scheduled",
    "schedule_replica_deletion",
    "schedule_replica_deletions",
    "undelete",
]

VERIFIED, DELETING, DELETED = (
    ReplicaState.VERIFIED.value,
    ReplicaState.DELETING.value,
    ReplicaState.DELETED.value,
)


#: Checkpoint ids per IN (...) list.
CHUNK = 500
# Batches go through the tables, not the ORM classes: one executemany each.
_REPLICAS = Replica.metadata.tables[Replica.__tablename__]
_AUDIT_EVENTS = AuditEvent.metadata.tables[AuditEvent.__tablename__]


class Origin(enum.StrEnum):
    """Who asked for a deletion; stored as the prefix of ``delete_reason`` (``"eviction: ..."``)."""

    RETENTION = "retention"  # a tier's policy dropped it: cancelled when the policy keeps it again
    EVICTION = "eviction"  # disk pressure: needs a re-checked durable copy elsewhere, always
    API = "api"  # an operator deleted the whole checkpoint

    def tag(self, reason: str) -> str:
        """``reason`` as stored: prefixed with this origin."""
        return f"{self.value}: {reason}"

    @classmethod
    def of(cls, stored: str | None) -> Origin:
        """The origin of a stored ``delete_reason`` (retention when it has no known prefix)."""
        head = (stored or "").split(":", 1)[0]
        return cls(head) if head in cls._value2member_map_ else cls.RETENTION


@dataclass(frozen=True)
class DueDeletion:
    """A replica whose deletion may run now (or has begun and must be finished)."""

    replica_id: int
    checkpoint_id: int
    run: str
    step: int
    tier: str
    path: str
    format: str
    reason: str
    begun: bool
    #: On a node-local tier, the part of a multi-part step this node deletes (None: the whole).
    part_id: int | None = None

    @property
    def origin(self) -> Origin:
        """Who asked for this deletion."""
        return Origin.of(self.reason)


@dataclass(frozen=True)
class Scheduled:
    """A replica to move to ``deleting`` until ``delete_after``, with the policy and reason why."""

    checkpoint_id: int
    tier: str
    delete_after: datetime
    reason: str
    policy: str


def schedule_replica_deletions(
    session: Session, items: Sequence[Scheduled], *, origin: Origin, actor: str
) -> list[Scheduled]:
    """Mark verified (or failed) replicas ``deleting``, each with its audit event; returns those marked.

    A replica that changed meanwhile, or whose checkpoint is now pinned or held, is left as
    it is. One look-up per 500 checkpoints, then one batched UPDATE and one batched INSERT
    (a pass that drops 20,000 replicas took 47,000 statements one by one: 11 s on SQLite).
    """
    replica_ids = _schedulable(session, {item.checkpoint_id for item in items})
    chosen = [
        (replica_ids[(i.checkpoint_id, i.tier)], i) for i in items if (i.checkpoint_id, i.tier) in replica_ids
    ]
    if not chosen:
        return []
    now = utcnow()
    table = _REPLICAS
    session.connection().execute(
        update(table)
        .where(table.c.id == bindparam("replica_id"))
        .values(
            state=DELETING, delete_after=bindparam("after"), delete_reason=bindparam("why"), updated_at=now
        ),
        [{"replica_id": rid, "after": i.delete_after, "why": origin.tag(i.reason)} for rid, i in chosen],
    )
    action = "eviction_scheduled" if origin is Origin.EVICTION else "deletion_scheduled"
    events = [
        {
            "at": now,
            "actor": actor,
            "action": action,
            "checkpoint_id": i.checkpoint_id,
            "tier": i.tier,
            "reason": i.reason,
            "detail": {"policy": i.policy, "delete_after": i.delete_after.isoformat()},
        }
        for _, i in chosen
    ]
    session.connection().execute(insert(_AUDIT_EVENTS), events)
    return [i for _, i in chosen]


def _schedulable(session: Session, checkpoint_ids: set[int]) -> dict[tuple[int, str], int]:
    """(checkpoint, tier) -> replica id, for verified or failed replicas of unprotected checkpoints."""
    unprotected = select(Checkpoint.id).where(
        ~Checkpoint.pinned, ~exists().where(Hold.checkpoint_id == Checkpoint.id)
    )
    found: dict[tuple[int, str], int] = {}
    ordered = sorted(checkpoint_ids)
    for start in range(0, len(ordered), CHUNK):
        query = select(Replica.id, Replica.checkpoint_id, Replica.tier).where(
            Replica.checkpoint_id.in_(ordered[start : start + CHUNK]),
            Replica.state.in_([VERIFIED, ReplicaState.FAILED.value]),
            Replica.checkpoint_id.in_(unprotected),
        )
        found.update({(cid, tier): rid for rid, cid, tier in session.execute(query)})
    return found


def schedule_replica_deletion(
    session: Session,
    checkpoint_id: int,
    tier: str,
    *,
    delete_after: datetime,
    origin: Origin,
    reason: str,
    policy: str,
    actor: str,
) -> bool:
    """One replica through ``schedule_replica_deletions``; False if it changed or is protected now."""
    item = Scheduled(checkpoint_id, tier, delete_after, reason, policy)
    return bool(schedule_replica_deletions(session, [item], origin=origin, actor=actor))


def schedule_checkpoint_deletion(
    session: Session,
    checkpoint_id: int,
    *,
    delays: Mapping[str, timedelta],
    now: datetime,
    actor: str,
    reason: str,
) -> list[str]:
    """Schedule deletion on every tier holding a copy, each after its own delay; returns the tiers.

    Raises NotFound, or Conflict when the checkpoint is pinned or held.
    """
    row = checkpoint_for_update(session, checkpoint_id)
    if row.pinned:
        raise Conflict(f"checkpoint {checkpoint_id} is pinned: unpin it first")
    if row.holds:
        names = ", ".join(h.name for h in row.holds)
        raise Conflict(f"checkpoint {checkpoint_id} is under legal hold ({names})")
    tiers = []
    stored = Origin.API.tag(f"{reason} (by {actor})")
    cancel_copy_jobs(session, checkpoint_id, f"the checkpoint is being deleted: {reason}")
    for replica in row.replicas:
        if replica.state in (DELETING, DELETED):
            continue
        # A copy on its way (or failed) holds nothing worth a delay: whatever it wrote goes now.
        delay = delays.get(replica.tier, timedelta(0)) if replica.state == VERIFIED else timedelta(0)
        replica.state, replica.delete_reason, replica.delete_after = DELETING, stored, now + delay
        tiers.append(replica.tier)
    append_event(
        session,
        actor=actor,
        action="delete_requested",
        checkpoint_id=row.id,
        reason=reason,
        detail={"tiers": tiers},
    )
    return tiers


def cancel_deletion(session: Session, replica_id: int, *, reason: str, actor: str) -> bool:
    """Give back a replica whose deletion has not begun; False when it has, or is not deleting."""
    replica = session.get(Replica, replica_id)
    if replica is None or replica.state != DELETING or replica.delete_after is None:
        return False
    give_back(replica)
    append_event(
        session,
        actor=actor,
        action="deletion_cancelled",
        checkpoint_id=replica.checkpoint_id,
        reason=reason,
        detail={},
        tier=replica.tier,
    )
    return True


def cancel_retention_deletion(
    session: Session, checkpoint_id: int, tier: str, *, reason: str, actor: str
) -> bool:
    """Give back a replica whose retention deletion has not begun, as its policy keeps it again."""
    replica = find_replica(session, checkpoint_id, tier)
    if replica is None or Origin.of(replica.delete_reason) is not Origin.RETENTION:
        return False
    return cancel_deletion(session, replica.id, reason=reason, actor=actor)


def undelete(session: Session, checkpoint_id: int, *, actor: str, reason: str) -> list[str]:
    """Cancel every deletion not yet begun and pin the checkpoint; returns the tiers given back.

    Raises NotFound, or Conflict when no deletion could be cancelled.
    """
    row = checkpoint_for_update(session, checkpoint_id)
    tiers = []
    for replica in row.replicas:
        if replica.state == DELETING and replica.delete_after is not None:
            give_back(replica)
            tiers.append(replica.tier)
    if not tiers:
        raise Conflict(f"checkpoint {checkpoint_id} has no deletion left to cancel")
    row.pinned = True
    append_event(
        session,
        actor=actor,
        action="undelete",
        checkpoint_id=row.id,
        reason=reason,
        detail={"tiers": tiers, "pinned": True},
    )
    return tiers


def due_deletions(
    session: Session,
    now: datetime,
    tiers: Sequence[str],
    *,
    checkpoint_id: int | None = None,
    node: str | None = None,
    node_local: Sequence[str] = (),
) -> list[DueDeletion]:
    """Replicas on ``tiers`` being deleted whose time has come, or whose deletion has begun.

    With ``node`` (a fleet), those on the ``node_local`` tiers only of ``node``'s own
    checkpoints (or of no node) or of steps it holds a part of.
    """
    query = (
        select(Replica, Checkpoint.run_id, Checkpoint.step, Checkpoint.path, Checkpoint.format, Run.name)
        .join(Checkpoint, Checkpoint.id == Replica.checkpoint_id)
        .join(Run, Run.id == Checkpoint.run_id)
        .where(Replica.state == DELETING, Replica.tier.in_(tiers))
        .where((Replica.delete_after.is_(None)) | (Replica.delete_after <= now))
        .order_by(Replica.delete_after.is_not(None), Replica.delete_after, Replica.id)
    )
    if checkpoint_id is not None:
        query = query.where(Replica.checkpoint_id == checkpoint_id)
    if node is not None and node_local:
        holds = exists().where(Part.checkpoint_id == Checkpoint.id, Part.node == node)
        query = query.where(Replica.tier.not_in(node_local) | Checkpoint.node.in_([node, ""]) | holds)
    return [
        DueDeletion(
            replica_id=replica.id,
            checkpoint_id=replica.checkpoint_id,
            run=run,
            step=step,
            tier=replica.tier,
            path=path,
            format=fmt,
            reason=replica.delete_reason or "",
            begun=replica.delete_after is None,
        )
        for replica, _run_id, step, path, fmt, run in session.execute(query)
    ]


def begin_deletion(session: Session, replica_id: int, now: datetime) -> bool:
    """Claim a due deletion (no undelete after this); False when it was cancelled meanwhile."""
    result = session.execute(
        update(Replica)
        .where(Replica.id == replica_id, Replica.state == DELETING)
        .where((Replica.delete_after.is_(None)) | (Replica.delete_after <= now))
        .values(delete_after=None)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def finish_deletion(session: Session, replica_id: int, *, actor: str, action: str = "deleted") -> None:
    """Mark the replica ``deleted``; the checkpoint too when no tier holds a copy any more."""
    replica = session.get(Replica, replica_id)
    if replica is None or replica.state != DELETING:
        return
    replica.state, replica.bytes_done, replica.verified_at = DELETED, 0, None
    set_part_copies(session, replica.checkpoint_id, replica.tier, ReplicaState.DELETED)
    append_event(
        session,
        actor=actor,
        action=action,
        checkpoint_id=replica.checkpoint_id,
        reason=replica.delete_reason or "",
        detail={},
        tier=replica.tier,
    )
    left = session.scalar(
        select(Replica.id).where(
            Replica.checkpoint_id == replica.checkpoint_id, Replica.state != DELETED, Replica.id != replica.id
        )
    )
    if left is None:
        checkpoint = session.get(Checkpoint, replica.checkpoint_id)
        if checkpoint is not None:
            checkpoint.state = CheckpointState.DELETED.value


def checkpoint_files(session: Session, checkpoint_id: int) -> list[tuple[str, int, str]]:
    """Every file of the checkpoint: (relpath, size, checksum), by relpath."""
    query = select(File.relpath, File.size, File.checksum).where(File.checkpoint_id == checkpoint_id)
    return [(r, s, c) for r, s, c in session.execute(query.order_by(File.relpath))]


@dataclass(frozen=True)
class DeletionContext:
    """What a deletion must know right before it runs, read in one transaction."""

    protected_by: str | None  # "pinned", "held by legal, audit", or None
    states: dict[str, str]  # tier -> replica state
    files: list[tuple[str, int, str]]  # (relpath, size, checksum)


def deletion_context(session: Session, checkpoint_id: int) -> DeletionContext:
    """The checkpoint's protection, replica states and files. Raises NotFound."""
    row = checkpoint_for_update(session, checkpoint_id)
    protected_by = None
    if row.pinned:
        protected_by = "pinned"
    elif row.holds:
        protected_by = "held by " + ", ".join(h.name for h in row.holds)
    states = {r.tier: r.state for r in row.replicas}
    return DeletionContext(protected_by, states, checkpoint_files(session, checkpoint_id))


def abandon_deletion(session: Session, replica_id: int, *, reason: str, actor: str, touched: bool) -> None:
    """A claimed deletion that must not run; the refusal is audited.

    Untouched, the replica returns to what it was. ``touched`` (the deletion had begun before
    a restart, so bytes may be gone) makes it ``failed``, for the scheduler to copy again.
    """
    replica = session.get(Replica, replica_id)
    if replica is None or replica.state != DELETING:
        return
    failed = f"deletion interrupted, then refused: {reason}" if touched else None
    refuse_deletion(session, replica, failed=failed, reason=reason, actor=actor, detail={})


def refuse_deletion(
    session: Session,
    replica: Replica,
    *,
    failed: str | None,
    reason: str,
    actor: str,
    detail: dict[str, Any],
) -> None:
    """End a refused deletion of ``replica`` and audit it (``deletion_refused``, with ``detail``).

    ``failed`` (bytes may be gone) makes the replica ``failed`` with that error, for the
    scheduler to copy again; None gives it back as it was.
    """
    if failed is not None:
        replica.state, replica.delete_after, replica.verified_at = ReplicaState.FAILED.value, None, None
        replica.error = failed
    else:
        give_back(replica)
    append_event(
        session,
        actor=actor,
        action="deletion_refused",
        checkpoint_id=replica.checkpoint_id,
        reason=reason,
        detail=detail,
        tier=replica.tier,
    )
