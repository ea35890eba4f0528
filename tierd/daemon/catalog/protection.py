"""Pins, legal holds and metrics: what an operator or a job says about one checkpoint.

Each change is written with its audit event in the same transaction, so the log never
misses one nor records one that did not happen. Functions take an open ``Session``
(the API's request session) and raise NotFound or Conflict as the API answers them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from tierd.daemon.catalog.audit import append_event
from tierd.daemon.catalog.models import (
    Checkpoint,
    Hold,
    Replica,
    ReplicaState,
    Run,
)
from tierd.errors import Conflict, NotFound

__all__ = [
    "add_hold",
    "checkpoint_for_update",
    "checkpoint_id_of",
    "give_back",
    "pin",
    "release_hold",
    "set_metrics",
    "unpin",
]


def checkpoint_id_of(session: Session, run: str, step: int) -> int:
    """The id of ``run``'s checkpoint at ``step``. Raises NotFound."""
    found = session.scalar(
        select(Checkpoint.id).join(Checkpoint.run).where(Run.name == run, Checkpoint.step == step)
    )
    if found is None:
        raise NotFound(f"run {run!r} has no checkpoint at step {step}")
    return found


def checkpoint_for_update(session: Session, checkpoint_id: int) -> Checkpoint:
    """The checkpoint with its replicas and holds, row-locked on PostgreSQL. Raises NotFound."""
    row = session.scalars(
        select(Checkpoint)
        .where(Checkpoint.id == checkpoint_id)
        .options(selectinload(Checkpoint.replicas), selectinload(Checkpoint.holds))
        .with_for_update(of=Checkpoint)
    ).one_or_none()
    if row is None:
        raise NotFound(f"checkpoint {checkpoint_id} does not exist")
    return row


def pin(
    session: Session, checkpoint_id: int, *, actor: str, reason: str, durable_tiers: Sequence[str]
) -> Checkpoint:
    """Pin a checkpoint: kept on every tier, and copied again to every durable tier that dropped it.

    A pending deletion is cancelled on every tier where it has not begun. Raises NotFound.
    """
    row = checkpoint_for_update(session, checkpoint_id)
    restored = [r.tier for r in row.replicas if _cancel_deletion(r)]
    recopy = [r.tier for r in row.replicas if r.tier in durable_tiers and _reset_deleted(r)]
    if not row.pinned:
        row.pinned = True
        append_event(
            session,
            actor=actor,
            action="pin",
            checkpoint_id=row.id,
            reason=reason,
            detail={"undeleted": restored, "recopy": recopy},
        )
    return row


def unpin(session: Session, checkpoint_id: int, *, actor: str, reason: str) -> Checkpoint:
    """Give the checkpoint back to retention. Raises NotFound."""
    row = checkpoint_for_update(session, checkpoint_id)
    if row.pinned:
        row.pinned = False
        append_event(session, actor=actor, action="unpin", checkpoint_id=row.id, reason=reason, detail={})
    return row


def add_hold(session: Session, checkpoint_id: int, *, name: str, reason: str, actor: str) -> Checkpoint:
    """Put a named legal hold on a checkpoint; cancels deletions not yet begun.

    Raises NotFound, or Conflict when a hold of that name is already set.
    """
    row = checkpoint_for_update(session, checkpoint_id)
    if any(h.name == name for h in row.holds):
        raise Conflict(f"checkpoint {checkpoint_id} already has a hold named {name!r}")
    row.holds.append(Hold(name=name, reason=reason, actor=actor))
    restored = [r.tier for r in row.replicas if _cancel_deletion(r)]
    append_event(
        session,
        actor=actor,
        action="hold",
        checkpoint_id=row.id,
        reason=reason,
        detail={"hold": name, "undeleted": restored},
    )
    return row


def release_hold(session: Session, checkpoint_id: int, *, name: str, actor: str, reason: str) -> Checkpoint:
    """Release the named hold. Raises NotFound (checkpoint or hold)."""
    row = checkpoint_for_update(session, checkpoint_id)
    hold = next((h for h in row.holds if h.name == name), None)
    if hold is None:
        raise NotFound(f"checkpoint {checkpoint_id} has no hold named {name!r}")
    row.holds.remove(hold)
    append_event(
        session,
        actor=actor,
        action="release",
        checkpoint_id=row.id,
        reason=reason,
        detail={"hold": name, "held_since": _iso(hold)},
    )
    return row


def set_metrics(
    session: Session, checkpoint_id: int, metrics: Mapping[str, float], *, actor: str
) -> Checkpoint:
    """Merge ``metrics`` into the checkpoint's (a key given again is replaced). Raises NotFound."""
    row = checkpoint_for_update(session, checkpoint_id)
    row.metrics = {**(row.metrics or {}), **{k: float(v) for k, v in metrics.items()}}
    append_event(
        session,
        actor=actor,
        action="metrics",
        checkpoint_id=row.id,
        reason="",
        detail={"metrics": dict(metrics)},
    )
    return row


def give_back(replica: Replica) -> None:
    """A replica leaving ``deleting`` returns to what it was: verified, or failed if it never was."""
    back = ReplicaState.VERIFIED if replica.verified_at is not None else ReplicaState.FAILED
    replica.state, replica.delete_after, replica.delete_reason = back.value, None, None


def _cancel_deletion(replica: Replica) -> bool:
    """Give the replica back when its deletion is scheduled but not begun."""
    if replica.state != ReplicaState.DELETING.value or replica.delete_after is None:
        return False
    give_back(replica)
    return True


def _reset_deleted(replica: Replica) -> bool:
    """A deleted replica becomes ``pending``, for the scheduler to copy again."""
    if replica.state != ReplicaState.DELETED.value:
        return False
    replica.state, replica.delete_reason, replica.bytes_done = ReplicaState.PENDING.value, None, 0
    return True


def _iso(hold: Hold) -> str:
    created: datetime = hold.created_at
    return created.isoformat()
