"""What a restore reads from peers: the verified peer copies of a step's parts, and a bad one failed.

A copy counts when it is ``verified`` and held by a node other than the part's own; the
holder's ``fleet.advertise_url`` and ``failure_domain`` come from its row in ``nodes`` (a
holder that never advertised a URL cannot be read, and is left out), with its heartbeat's
age on the database's clock. ``node_files`` names the files of one node's part, for a restore
by node name.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Select, select, update
from sqlalchemy.orm import Session

from tierd.daemon.catalog.audit import append_event
from tierd.daemon.catalog.fleet import database_now
from tierd.daemon.catalog.models import Checkpoint, File, Node, Part, PeerCopy, ReplicaState, utcnow

__all__ = [
    "PeerHolding",
    "fail_peer_copy",
    "has_peer_copies",
    "node_files",
    "peer_copied_checkpoints",
    "verified_peer_copies",
]


@dataclass(frozen=True)
class PeerHolding:
    """One verified copy of one node's part, on ``holder``, with the files of that part."""

    part_id: int
    node: str  # whose part it is
    holder: str
    url: str
    domain: str | None
    heartbeat_age: float  # seconds since the holder's last heartbeat (database clock)
    relpaths: frozenset[str]


def verified_peer_copies(session: Session, checkpoint_id: int) -> list[PeerHolding]:
    """Every verified copy of the checkpoint's parts on a node that can be reached, by holder then node."""
    now = database_now(session)
    columns = (Part.id, Part.node, PeerCopy.holder, Node.advertise_url, Node.failure_domain)
    rows = session.execute(
        select(*columns, Node.heartbeat_at)
        .join(PeerCopy, PeerCopy.part_id == Part.id)
        .join(Node, Node.name == PeerCopy.holder)
        .where(
            Part.checkpoint_id == checkpoint_id,
            PeerCopy.state == ReplicaState.VERIFIED.value,
            PeerCopy.holder != Part.node,
            Node.advertise_url.is_not(None),
        )
        .order_by(PeerCopy.holder, Part.node)
    ).all()
    files: dict[int, set[str]] = {}
    part_ids = list({row.id for row in rows})
    for part_id, relpath in session.execute(
        select(File.part_id, File.relpath).where(File.part_id.in_(part_ids))
    ):
        if part_id is not None:
            files.setdefault(part_id, set()).add(relpath)
    return [
        PeerHolding(
            row.id,
            row.node,
            row.holder,
            row.advertise_url,
            row.failure_domain,
            (now - row.heartbeat_at).total_seconds(),
            frozenset(files.get(row.id, ())),
        )
        for row in rows
    ]


def peer_copied_checkpoints() -> Select[int]:
    """The ids of checkpoints some part of which has a verified copy on a node other than its own."""
    return (
        select(Part.checkpoint_id)
        .join(PeerCopy, PeerCopy.part_id == Part.id)
        .where(PeerCopy.state == ReplicaState.VERIFIED.value, PeerCopy.holder != Part.node)
    )


def has_peer_copies(session: Session, checkpoint_id: int) -> bool:
    """Whether some part of the checkpoint has a verified copy on a node other than its own."""
    found = session.scalar(peer_copied_checkpoints().where(Part.checkpoint_id == checkpoint_id).limit(1))
    return found is not None


def fail_peer_copy(session: Session, part_id: int, holder: str, *, error: str, actor: str) -> bool:
    """Mark ``holder``'s copy of the part ``failed`` (bad bytes found); audited ``peer_copy_failed``.

    Only a copy still ``verified`` is marked. Returns whether it was.
    """
    result = session.execute(
        update(PeerCopy)
        .where(
            PeerCopy.part_id == part_id,
            PeerCopy.holder == holder,
            PeerCopy.state == ReplicaState.VERIFIED.value,
        )
        .values(state=ReplicaState.FAILED.value, verified_at=None, error=error, updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    part = session.get(Part, part_id)
    append_event(
        session,
        actor=actor,
        action="peer_copy_failed",
        checkpoint_id=None if part is None else part.checkpoint_id,
        reason=error,
        detail={"part": part_id, "node": None if part is None else part.node, "holder": holder},
    )
    return True


def node_files(session: Session, checkpoint_id: int, node: str) -> frozenset[str]:
    """The relpaths of ``node``'s part of the checkpoint.

    A step recorded without parts: all of them when ``node`` recorded it, else none.
    """
    parts = session.scalars(select(Part.node).where(Part.checkpoint_id == checkpoint_id)).all()
    if parts:
        query = select(File.relpath).join(Part, Part.id == File.part_id).where(Part.node == node)
        return frozenset(session.scalars(query.where(File.checkpoint_id == checkpoint_id)))
    checkpoint = session.get(Checkpoint, checkpoint_id)
    if checkpoint is None or checkpoint.node != node:
        return frozenset()
    return frozenset(session.scalars(select(File.relpath).where(File.checkpoint_id == checkpoint_id)))
