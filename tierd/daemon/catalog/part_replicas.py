"""Each part's copy on each tier, and the step's replica they settle once every part is there.

A step that spans nodes has one ``replicas`` row per tier and one ``part_replicas`` row per
part and tier. Each node's hop of its own part moves its part replica (copying, verified,
failed, bytes copied); the step's replica is ``copying`` while any part is, and verified
(``settle_parts``) by whichever part is verified last. A whole-checkpoint hop or deletion
moves every part's copy with it (``set_part_copies``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from tierd.daemon.catalog.audit import append_event
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.dialect import skip_locked
from tierd.daemon.catalog.models import (
    Checkpoint,
    CheckpointState,
    File,
    Part,
    PartReplica,
    Replica,
    ReplicaState,
    utcnow,
)
from tierd.daemon.catalog.replicas import GONE

__all__ = [
    "Settled",
    "files_of_part",
    "lock_replica",
    "mark_part_copying",
    "mark_part_deleted",
    "mark_part_failed",
    "mark_part_unverified",
    "mark_part_verified",
    "mark_step_copying",
    "part_replica",
    "parts_gone_from",
    "parts_left_on",
    "parts_verified_on",
    "record_part_bytes",
    "set_part_copies",
    "settle_parts",
    "settle_replica",
    "share_replica",
]


def share_replica(session: Session, checkpoint_id: int, tier: str) -> Replica | None:
    """The checkpoint's replica on ``tier``, share-locked until the transaction ends.

    Holders of a share lock do not wait for each other; a change to the row waits for them.
    """
    return session.scalars(
        select(Replica)
        .where(Replica.checkpoint_id == checkpoint_id, Replica.tier == tier)
        .with_for_update(read=True)
        .execution_options(populate_existing=True)
    ).one_or_none()


def lock_replica(session: Session, checkpoint_id: int, tier: str) -> Replica | None:
    """The checkpoint's replica on ``tier``, locked until the transaction ends."""
    return session.scalars(
        select(Replica)
        .where(Replica.checkpoint_id == checkpoint_id, Replica.tier == tier)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()


def part_replica(session: Session, part_id: int, tier: str) -> PartReplica | None:
    """The part's replica on ``tier``, or None."""
    return session.scalars(
        select(PartReplica).where(PartReplica.part_id == part_id, PartReplica.tier == tier)
    ).one_or_none()


def parts_verified_on(session: Session, checkpoint_id: int, tier: str) -> bool:
    """Whether the checkpoint has parts and every one is verified on ``tier``."""
    return parts_left_on(session, checkpoint_id, tier) == 0


def parts_left_on(session: Session, checkpoint_id: int, tier: str) -> int | None:
    """How many of the checkpoint's parts are not verified on ``tier``; None when it has no parts."""
    total, verified = session.execute(
        select(
            func.count(),
            func.count().filter(PartReplica.state == ReplicaState.VERIFIED.value),
        )
        .select_from(Part)
        .outerjoin(PartReplica, (PartReplica.part_id == Part.id) & (PartReplica.tier == tier))
        .where(Part.checkpoint_id == checkpoint_id)
    ).one()
    return None if not total else int(total) - int(verified)


def parts_gone_from(session: Session, checkpoint_id: int, tier: str) -> bool:
    """Whether no part of the checkpoint is left on ``tier`` (each node's copy deleted)."""
    left = session.scalar(
        select(func.count())
        .select_from(PartReplica)
        .join(Part, Part.id == PartReplica.part_id)
        .where(
            Part.checkpoint_id == checkpoint_id,
            PartReplica.tier == tier,
            PartReplica.state != ReplicaState.DELETED.value,
        )
    )
    return not left


def files_of_part(session: Session, part_id: int) -> list[File]:
    """The part's files by relative path."""
    return list(session.scalars(select(File).where(File.part_id == part_id).order_by(File.relpath)))


def mark_part_copying(row: PartReplica) -> None:
    """A hop of the part into the replica's tier has started."""
    row.state, row.error = ReplicaState.COPYING.value, None


def mark_step_copying(session: Session, replica: Replica) -> None:
    """A part's hop into the replica's tier started: the step's replica is ``copying`` too.

    The parts of a step start on many nodes at once, each seeing the replica not yet
    ``copying``: only one marks it, the others skip the row while it is locked (PostgreSQL)
    rather than queue on it to write the same value.
    """
    if replica.state == ReplicaState.COPYING.value:
        return
    free = skip_locked(
        select(Replica.id).where(
            Replica.id == replica.id,
            Replica.state.not_in([ReplicaState.COPYING.value, ReplicaState.VERIFIED.value, *GONE]),
        ),
        session,
        of=Replica,
    )
    session.execute(
        update(Replica)
        .where(Replica.id.in_(free.scalar_subquery()))
        .values(state=ReplicaState.COPYING.value, error=None)
        .execution_options(synchronize_session=False)
    )


def mark_part_verified(row: PartReplica, total_bytes: int) -> None:
    """Every file of the part matched its checksum on the replica's tier."""
    row.state, row.error, row.verified_at = ReplicaState.VERIFIED.value, None, utcnow()
    row.bytes_done = total_bytes


def mark_part_failed(row: PartReplica, error: str) -> None:
    """The part's hop into the replica's tier failed with ``error``."""
    row.state, row.error = ReplicaState.FAILED.value, error


def mark_part_unverified(row: PartReplica, error: str) -> None:
    """The part's copy on the replica's tier no longer holds its first-sight bytes: failed, not verified."""
    row.state, row.error, row.verified_at = ReplicaState.FAILED.value, error, None


def mark_part_deleted(row: PartReplica) -> None:
    """The part's bytes are gone from the replica's tier."""
    row.state, row.bytes_done, row.verified_at = ReplicaState.DELETED.value, 0, None


def record_part_bytes(session: Session, part_id: int, tier: str, bytes_done: int) -> None:
    """The bytes copied so far of the part's ``copying`` replica on ``tier``."""
    row = part_replica(session, part_id, tier)
    if row is not None and row.state == ReplicaState.COPYING.value:
        row.bytes_done = bytes_done


def set_part_copies(session: Session, checkpoint_id: int, tier: str, state: ReplicaState) -> None:
    """The checkpoint's whole copy on ``tier`` went to ``state``: so did every part's.

    ``verified`` (a whole-checkpoint hop finished): each part verified with its bytes; any
    other state (deleted, failed): each part's copy is gone.
    """
    verified = state is ReplicaState.VERIFIED
    rows = session.execute(
        select(PartReplica, Part.total_bytes)
        .join(Part, Part.id == PartReplica.part_id)
        .where(Part.checkpoint_id == checkpoint_id, PartReplica.tier == tier)
    )
    for row, total in rows:
        row.state, row.error = state.value, None
        row.bytes_done, row.verified_at = (total, utcnow()) if verified else (0, None)


def settle_replica(session: Session, replica: Replica, location: str) -> bool:
    """Verify the (locked) replica when its step is complete and every part is verified there.

    Returns whether it did.
    """
    row = session.get(Checkpoint, replica.checkpoint_id)
    if row is None or row.state != CheckpointState.COMPLETE.value:
        return False
    if not parts_verified_on(session, row.id, replica.tier):
        return False
    replica.state, replica.error, replica.verified_at = ReplicaState.VERIFIED.value, None, utcnow()
    replica.location, replica.bytes_done = location, row.total_bytes
    return True


@dataclass(frozen=True)
class Settled:
    """What ``settle_parts`` saw: parts not yet verified on the tier, and whether it settled the step."""

    left: int | None
    settled: bool = False


def settle_parts(db: Database, checkpoint_id: int, tier: str, location: str, *, actor: str) -> Settled:
    """Verify the step's replica on ``tier`` once every part is verified there.

    Called after a part's own transaction committed: whichever part commits last sees every
    other part verified, so the step is never left unverified, and only then is the replica
    locked. The scheduler calls it too, for a step whose last part's daemon died in between.
    Raises CatalogError.
    """
    with db.read_session() as session:
        left = parts_left_on(session, checkpoint_id, tier)
    if left != 0:
        return Settled(left)
    with db.session() as session:
        replica = lock_replica(session, checkpoint_id, tier)
        if replica is None or replica.state in GONE or replica.state == ReplicaState.VERIFIED.value:
            return Settled(0)
        if not settle_replica(session, replica, location):
            return Settled(0)
        append_event(
            session,
            actor=actor,
            action="replica_verified",
            checkpoint_id=checkpoint_id,
            tier=tier,
            reason="every part verified on the tier",
            detail={},
        )
        return Settled(0, settled=True)
