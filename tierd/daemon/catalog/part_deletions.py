"""A multi-part step leaving a node-local tier: each node deletes its own part.

On a node-local tier 0 a step written by several nodes is one ``replicas`` row but one part
(``part_replicas`` row) per node, each on its own node's disk. Its deletion is scheduled on
the step's replica as any other (``deleting`` + ``delete_after``, undelete until then). Then::

    step replica deleting, T passed ──first node claims──▶ delete_after=None,
        every part replica not yet deleted ──▶ deleting
    each node: its own part's files removed ──▶ its part replica deleted
    the last part deleted ──▶ the step's replica deleted (``finish_deletion``)

A node that is down keeps its part (its part replica stays ``deleting``) until it comes back
and finds the deletion begun. A step with one part (the single-node case) never comes here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from tierd.daemon.catalog.audit import append_event
from tierd.daemon.catalog.models import File, Part, PartReplica, Replica, ReplicaState
from tierd.daemon.catalog.part_replicas import lock_replica, parts_gone_from
from tierd.daemon.catalog.replica_deletions import DueDeletion, finish_deletion, refuse_deletion

__all__ = [
    "abandon_part_deletion",
    "begin_part_deletion",
    "finish_part_deletion",
    "for_own_parts",
    "own_parts",
    "part_files",
    "start_part_removal",
]

DELETING, DELETED = ReplicaState.DELETING.value, ReplicaState.DELETED.value


def own_parts(
    session: Session, checkpoint_ids: Collection[int], tier: str, node: str
) -> dict[int, tuple[int, int | None, str | None]]:
    """Per checkpoint id: (its part count, ``node``'s part id, that part's state on ``tier``).

    Only for checkpoints with parts; the part id and state are None when ``node`` has none.
    """
    query = (
        select(Part.checkpoint_id, Part.id, Part.node, PartReplica.state)
        .outerjoin(PartReplica, (PartReplica.part_id == Part.id) & (PartReplica.tier == tier))
        .where(Part.checkpoint_id.in_(sorted(checkpoint_ids)))
    )
    found: dict[int, tuple[int, int | None, str | None]] = {}
    for cid, part_id, part_node, state in session.execute(query):
        count, mine, mine_state = found.get(cid, (0, None, None))
        if part_node == node:
            mine, mine_state = part_id, state
        found[cid] = (count + 1, mine, mine_state)
    return found


def for_own_parts(
    session: Session, due: Sequence[DueDeletion], node_local: Collection[str], node: str
) -> list[DueDeletion]:
    """``due`` as ``node`` runs it: a multi-part step on a node-local tier becomes ``node``'s part.

    Such a step is left out when ``node`` holds no part of it, or its part there is deleted
    already; everything else (one part, a shared tier) is kept as it is.
    """
    local = [d for d in due if d.tier in node_local]
    parts: dict[tuple[int, str], tuple[int, int | None, str | None]] = {}
    for tier in {d.tier for d in local}:
        ids = {d.checkpoint_id for d in local if d.tier == tier}
        parts.update({(cid, tier): v for cid, v in own_parts(session, ids, tier, node).items()})
    kept = []
    for item in due:
        count, mine, state = parts.get((item.checkpoint_id, item.tier), (0, None, None))
        if count <= 1:
            kept.append(item)
        elif mine is not None and state != DELETED:
            kept.append(dataclasses.replace(item, part_id=mine))
    return kept


def begin_part_deletion(session: Session, replica_id: int, part_id: int, now: datetime) -> bool:
    """Claim ``part_id``'s deletion from the step's (deleting) replica; False when not possible.

    The first claim of the step begins its deletion (no undelete after this) and moves every
    part replica on the tier not yet deleted to ``deleting``; later claims find it begun.
    """
    replica = session.get(Replica, replica_id)
    if replica is None:
        return False
    replica = lock_replica(session, replica.checkpoint_id, replica.tier)
    if replica is None or replica.state != DELETING:
        return False
    if replica.delete_after is not None and replica.delete_after > now:
        return False
    replica.delete_after = None
    rows = _part_replicas(session, replica.checkpoint_id, replica.tier)
    for row in rows:
        if row.state != DELETED:
            row.state, row.error = DELETING, None
    return any(row.part_id == part_id and row.state == DELETING for row in rows)


def finish_part_deletion(
    session: Session, replica_id: int, part_id: int, *, node: str, actor: str, action: str = "deleted"
) -> bool:
    """The part's files are gone: its replica is ``deleted``; the step's too once every part's is.

    Returns whether the step's replica was finished.
    """
    replica = session.get(Replica, replica_id)
    if replica is None:
        return False
    replica = lock_replica(session, replica.checkpoint_id, replica.tier)
    if replica is None or replica.state != DELETING:
        return False
    for row in _part_replicas(session, replica.checkpoint_id, replica.tier):
        if row.part_id == part_id and row.state != DELETED:
            row.state, row.bytes_done, row.verified_at = DELETED, 0, None
    append_event(
        session,
        actor=actor,
        action=f"part_{action}",
        checkpoint_id=replica.checkpoint_id,
        reason=replica.delete_reason or "",
        detail={"part": part_id, "node": node},
        tier=replica.tier,
    )
    session.flush()
    if not parts_gone_from(session, replica.checkpoint_id, replica.tier):
        return False
    finish_deletion(session, replica.id, actor=actor, action=action)
    return True


def start_part_removal(session: Session, part_id: int, tier: str) -> None:
    """The part's files are about to go: its bytes on ``tier`` are no longer known good.

    A refusal after a crash from here on (``abandon_part_deletion``) fails the part.
    """
    session.execute(
        update(PartReplica)
        .where(PartReplica.part_id == part_id, PartReplica.tier == tier, PartReplica.state == DELETING)
        .values(verified_at=None)
        .execution_options(synchronize_session=False)
    )


def abandon_part_deletion(
    session: Session, replica_id: int, part_id: int, *, reason: str, actor: str, node: str
) -> None:
    """A node refuses to delete its part (pinned, held, no good durable copy); audited.

    While no part is deleted or being removed, the step's replica and every part's are
    given back (``verified``). Otherwise the step's copy there is broken: the replica is
    ``failed``, as is a part whose removal had started (``start_part_removal``); the parts
    still whole go back to ``verified``.
    """
    replica = session.get(Replica, replica_id)
    if replica is None:
        return
    replica = lock_replica(session, replica.checkpoint_id, replica.tier)
    if replica is None or replica.state != DELETING:
        return
    rows = _part_replicas(session, replica.checkpoint_id, replica.tier)
    cut = [row for row in rows if row.state == DELETING and row.verified_at is None]
    broken = bool(cut) or any(row.state == DELETED for row in rows)
    for row in rows:
        if row in cut:
            row.state, row.error = ReplicaState.FAILED.value, f"deletion interrupted, then refused: {reason}"
        elif row.state == DELETING:
            row.state = ReplicaState.VERIFIED.value
    failed = f"part deletion refused on {node}: {reason}" if broken else None
    detail: dict[str, Any] = {"part": part_id, "node": node}
    refuse_deletion(session, replica, failed=failed, reason=reason, actor=actor, detail=detail)


def part_files(session: Session, part_id: int) -> list[tuple[str, int, str]]:
    """The part's files: (relpath, size, checksum), by relpath."""
    query = select(File.relpath, File.size, File.checksum).where(File.part_id == part_id)
    return [(r, s, c) for r, s, c in session.execute(query.order_by(File.relpath))]


def _part_replicas(session: Session, checkpoint_id: int, tier: str) -> Sequence[PartReplica]:
    return session.scalars(
        select(PartReplica)
        .join(Part, Part.id == PartReplica.part_id)
        .where(Part.checkpoint_id == checkpoint_id, PartReplica.tier == tier)
        .order_by(PartReplica.id)
    ).all()
