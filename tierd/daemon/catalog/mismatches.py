"""A replica whose bytes a re-check found bad: ``failed``, audited, for the scheduler to copy again.

Retention re-checks a copy before it deletes another, the scrubber re-reads copies, a
restore reads them, and tier 0's presence check stats them: each calls
``mark_recheck_failed`` when the bytes are not the recorded ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import update
from sqlalchemy.orm import Session

from tierd.daemon.catalog.audit import append_event
from tierd.daemon.catalog.models import PartReplica, Replica, ReplicaState
from tierd.daemon.catalog.part_replicas import set_part_copies

__all__ = ["mark_recheck_failed"]


def mark_recheck_failed(
    session: Session,
    checkpoint_id: int,
    tier: str,
    *,
    error: str,
    actor: str,
    bad_files: Sequence[Mapping[str, str | None]] = (),
    part_id: int | None = None,
) -> bool:
    """A re-check found bad bytes: the replica is ``failed`` (the scheduler copies it again).

    With ``part_id`` (one node's part re-checked on its node-local tier) only that part's
    replica fails with the step's; the other parts' bytes were not looked at.

    Only a replica still ``verified`` is marked: one that left meanwhile (retention deleting
    it) is not rot. Each of ``bad_files`` (file, expected and actual checksum) is audited with
    the state change. Returns whether the replica was marked.
    """
    result = session.execute(
        update(Replica)
        .where(
            Replica.checkpoint_id == checkpoint_id,
            Replica.tier == tier,
            Replica.state == ReplicaState.VERIFIED.value,
        )
        .values(state=ReplicaState.FAILED.value, error=error, verified_at=None, checked_at=None, bytes_done=0)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    if part_id is None:
        set_part_copies(session, checkpoint_id, tier, ReplicaState.FAILED)
    else:
        _fail_part(session, part_id, tier, error)
    _audit_failure(session, checkpoint_id, tier, error=error, actor=actor, bad_files=bad_files)
    return True


def _fail_part(session: Session, part_id: int, tier: str, error: str) -> None:
    session.execute(
        update(PartReplica)
        .where(PartReplica.part_id == part_id, PartReplica.tier == tier)
        .values(state=ReplicaState.FAILED.value, error=error, verified_at=None, checked_at=None, bytes_done=0)
        .execution_options(synchronize_session=False)
    )


def _audit_failure(
    session: Session,
    checkpoint_id: int,
    tier: str,
    *,
    error: str,
    actor: str,
    bad_files: Sequence[Mapping[str, str | None]],
) -> None:
    """``replica_mismatch`` for each bad file, then ``reverify_failed``."""
    for bad in bad_files:
        append_event(
            session,
            actor=actor,
            action="replica_mismatch",
            checkpoint_id=checkpoint_id,
            reason=f"{bad.get('file')}: {bad.get('problem')}",
            detail=dict(bad),
            tier=tier,
        )
    append_event(
        session,
        actor=actor,
        action="reverify_failed",
        checkpoint_id=checkpoint_id,
        reason=error,
        detail={},
        tier=tier,
    )
