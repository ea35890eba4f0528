"""What the scrubber reads and writes: verified replicas due for a re-check, and its progress.

A replica's last check is ``checked_at``, or ``verified_at`` until it was first re-checked
(the copy itself verified the bytes then). It is due once that is older than the tier's
``scrub.every``; never re-checked replicas go first, then the oldest check.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.orm import Session

from tierd.daemon.catalog.checkpoints import get_checkpoint
from tierd.daemon.catalog.deletions import checkpoint_files
from tierd.daemon.catalog.models import Checkpoint, CheckpointState, Replica, ReplicaState

__all__ = [
    "ScrubCandidate",
    "ScrubProgress",
    "VerifyTarget",
    "due_for_scrub",
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


def _scrubbable(tier: str, node: str | None) -> list[ColumnElement[bool]]:
    """Verified replicas of complete checkpoints on ``tier`` (of ``node`` alone, when given)."""
    checkpoints = select(Checkpoint.id).where(Checkpoint.state == CheckpointState.COMPLETE.value)
    if node is not None:
        checkpoints = checkpoints.where(Checkpoint.node.in_([node, ""]))
    return [Replica.tier == tier, Replica.state == VERIFIED, Replica.checkpoint_id.in_(checkpoints)]


def due_for_scrub(
    session: Session, tier: str, checked_before: datetime, limit: int, *, node: str | None = None
) -> list[ScrubCandidate]:
    """Up to ``limit`` verified replicas on ``tier`` last checked before ``checked_before``.

    Never re-checked first, then the oldest check first. ``node`` (for a node-local tier)
    keeps to the checkpoints that node wrote.
    """
    rows = session.execute(
        select(Replica.id, Replica.checkpoint_id)
        .where(*_scrubbable(tier, node), _last_check() <= checked_before)
        .order_by(Replica.checked_at.is_not(None), _last_check(), Replica.id)
        .limit(limit)
    ).all()
    return [ScrubCandidate(rid, cid, tier, checkpoint_files(session, cid)) for rid, cid in rows]


def scrub_progress(session: Session, tier: str, since: datetime, *, node: str | None = None) -> ScrubProgress:
    """How many verified replicas on ``tier`` were checked (or copied) after ``since``, of how many."""
    total, checked, oldest = session.execute(
        select(
            func.count(),
            func.count().filter(_last_check() > since),
            func.min(_last_check()),
        ).where(*_scrubbable(tier, node))
    ).one()
    return ScrubProgress(int(checked or 0), int(total or 0), oldest)


def mark_replica_checked(session: Session, replica_id: int, at: datetime) -> bool:
    """A re-check found every file good: ``checked_at`` is ``at``, if it is still verified."""
    result = session.execute(
        update(Replica)
        .where(Replica.id == replica_id, Replica.state == VERIFIED)
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


def verify_target(session: Session, checkpoint_id: int) -> VerifyTarget:
    """The checkpoint's replicas and files, for a verify call. Raises NotFound."""
    row = get_checkpoint(session, checkpoint_id)
    replicas = [(r.id, r.tier, r.state) for r in row.replicas]
    files = [(f.relpath, f.size, f.checksum) for f in row.files]
    return VerifyTarget(row.id, row.node, replicas, files)
