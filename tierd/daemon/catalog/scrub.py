"""What the scrubber reads and writes: verified replicas due for a re-check, and its progress.

A replica's last check is ``checked_at``, or ``verified_at`` until it was first re-checked
(the copy itself verified the bytes then). It is due once that is older than the tier's
``scrub.every``; never re-checked replicas go first, then the oldest check.

On a node-local tier a step written by several nodes is re-checked part by part: each node
checks its own part's files (another node's are elsewhere, not missing), and each part
replica keeps its own ``checked_at``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, Select, func, select, update
from sqlalchemy.orm import Session

from tierd.daemon.catalog.checkpoints import get_checkpoint
from tierd.daemon.catalog.models import Checkpoint, CheckpointState, Part, PartReplica, Replica, ReplicaState
from tierd.daemon.catalog.part_deletions import part_files
from tierd.daemon.catalog.replica_deletions import checkpoint_files

__all__ = [
    "ScrubCandidate",
    "ScrubProgress",
    "VerifyTarget",
    "due_for_scrub",
    "mark_part_checked",
    "mark_replica_checked",
    "scrub_progress",
    "verify_target",
]

VERIFIED = ReplicaState.VERIFIED.value


@dataclass(frozen=True)
class ScrubCandidate:
    """A verified replica to re-check, with its checkpoint's files (relpath, size, checksum)."""

    replica_id: int
    checkpoint_id: int
    tier: str
    files: list[tuple[str, int, str]]
    #: On a node-local tier, the part (this node's) of a step in several parts that is checked.
    part_id: int | None = None

    @property
    def total_bytes(self) -> int:
        """The bytes a read-back of the replica reads."""
        return sum(size for _, size, _ in self.files)


@dataclass(frozen=True)
class ScrubProgress:
    """One tier's scrub: replicas checked within the last ``every``, of ``total`` verified."""

    checked: int
    total: int
    #: The oldest last check (``checked_at``, else ``verified_at``) of a verified replica.
    oldest_check: datetime | None


def _last_check() -> ColumnElement[datetime]:
    return func.coalesce(Replica.checked_at, Replica.verified_at)


def _several_parts() -> Select[int]:
    return select(Part.checkpoint_id).group_by(Part.checkpoint_id).having(func.count() > 1)


def _scrubbable(tier: str, node: str | None) -> list[ColumnElement[bool]]:
    """Verified replicas of complete checkpoints on ``tier`` (of ``node`` alone, in one part, when given)."""
    checkpoints = select(Checkpoint.id).where(Checkpoint.state == CheckpointState.COMPLETE.value)
    if node is not None:
        checkpoints = checkpoints.where(
            Checkpoint.node.in_([node, ""]), Checkpoint.id.not_in(_several_parts())
        )
    return [Replica.tier == tier, Replica.state == VERIFIED, Replica.checkpoint_id.in_(checkpoints)]


def _part_check() -> ColumnElement[datetime]:
    return func.coalesce(PartReplica.checked_at, PartReplica.verified_at)


def _due_parts(
    session: Session, tier: str, node: str, checked_before: datetime, limit: int
) -> list[ScrubCandidate]:
    """``node``'s verified parts on ``tier`` of complete steps in several parts, due for a re-check."""
    rows = session.execute(
        select(Replica.id, Part.checkpoint_id, Part.id)
        .join(Part, Part.checkpoint_id == Replica.checkpoint_id)
        .join(PartReplica, (PartReplica.part_id == Part.id) & (PartReplica.tier == tier))
        .join(Checkpoint, Checkpoint.id == Part.checkpoint_id)
        .where(Replica.tier == tier, Replica.state == VERIFIED, PartReplica.state == VERIFIED)
        .where(Part.node == node, Checkpoint.state == CheckpointState.COMPLETE.value)
        .where(Part.checkpoint_id.in_(_several_parts()), _part_check() <= checked_before)
        .order_by(PartReplica.checked_at.is_not(None), _part_check(), PartReplica.id)
        .limit(limit)
    ).all()
    return [ScrubCandidate(rid, cid, tier, part_files(session, pid), pid) for rid, cid, pid in rows]


def due_for_scrub(
    session: Session, tier: str, checked_before: datetime, limit: int, *, node: str | None = None
) -> list[ScrubCandidate]:
    """Up to ``limit`` verified replicas on ``tier`` last checked before ``checked_before``.

    Never re-checked first, then the oldest check first. ``node`` (for a node-local tier)
    keeps to the checkpoints that node wrote, and its own parts of steps in several parts.
    """
    rows = session.execute(
        select(Replica.id, Replica.checkpoint_id)
        .where(*_scrubbable(tier, node), _last_check() <= checked_before)
        .order_by(Replica.checked_at.is_not(None), _last_check(), Replica.id)
        .limit(limit)
    ).all()
    due = [ScrubCandidate(rid, cid, tier, checkpoint_files(session, cid)) for rid, cid in rows]
    if node is not None and len(due) < limit:
        due += _due_parts(session, tier, node, checked_before, limit - len(due))
    return due


def scrub_progress(session: Session, tier: str, since: datetime, *, node: str | None = None) -> ScrubProgress:
    """How many verified replicas on ``tier`` were checked (or copied) after ``since``, of how many.

    With ``node``, its own parts of steps in several parts count one each.
    """
    total, checked, oldest = session.execute(
        select(
            func.count(),
            func.count().filter(_last_check() > since),
            func.min(_last_check()),
        ).where(*_scrubbable(tier, node))
    ).one()
    if node is None:
        return ScrubProgress(int(checked or 0), int(total or 0), oldest)
    parts, parts_checked, parts_oldest = session.execute(
        select(func.count(), func.count().filter(_part_check() > since), func.min(_part_check()))
        .select_from(PartReplica)
        .join(Part, Part.id == PartReplica.part_id)
        .join(Checkpoint, Checkpoint.id == Part.checkpoint_id)
        .where(PartReplica.tier == tier, PartReplica.state == VERIFIED, Part.node == node)
        .where(Checkpoint.state == CheckpointState.COMPLETE.value, Part.checkpoint_id.in_(_several_parts()))
    ).one()
    first: datetime | None = min((t for t in (oldest, parts_oldest) if t is not None), default=None)
    return ScrubProgress(
        int(checked or 0) + int(parts_checked or 0), int(total or 0) + int(parts or 0), first
    )


def mark_replica_checked(session: Session, replica_id: int, at: datetime) -> bool:
    """A re-check found every file good: ``checked_at`` is ``at``, if it is still verified."""
    result = session.execute(
        update(Replica)
        .where(Replica.id == replica_id, Replica.state == VERIFIED)
        .values(checked_at=at)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def mark_part_checked(session: Session, part_id: int, tier: str, at: datetime) -> bool:
    """A re-check found every file of the part good on ``tier``: its ``checked_at`` is ``at``."""
    result = session.execute(
        update(PartReplica)
        .where(PartReplica.part_id == part_id, PartReplica.tier == tier, PartReplica.state == VERIFIED)
        .values(checked_at=at)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class VerifyTarget:
    """A checkpoint to verify now: the node that wrote it, its replicas and its files."""

    checkpoint_id: int
    node: str
    #: (replica id, tier, state), in tier order.
    replicas: list[tuple[int, str, str]]
    files: list[tuple[str, int, str]]
    #: node -> its part's id, for a step in several parts (empty otherwise).
    parts: dict[str, int]


def verify_target(session: Session, checkpoint_id: int) -> VerifyTarget:
    """The checkpoint's replicas and files, for a verify call. Raises NotFound."""
    row = get_checkpoint(session, checkpoint_id)
    replicas = [(r.id, r.tier, r.state) for r in row.replicas]
    files = [(f.relpath, f.size, f.checksum) for f in row.files]
    parts = {p.node: p.id for p in row.parts} if len(row.parts) > 1 else {}
    return VerifyTarget(row.id, row.node, replicas, files, parts)
