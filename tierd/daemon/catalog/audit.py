"""The append-only audit log: what happened to a checkpoint, who did it and why."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from tierd.daemon.catalog.models import AuditEvent

__all__ = ["append_event", "list_events", "recent_events"]


def append_event(
    session: Session,
    *,
    actor: str,
    action: str,
    checkpoint_id: int | None,
    reason: str,
    detail: dict[str, Any],
    tier: str | None = None,
) -> None:
    """Add one event (inside the caller's transaction)."""
    session.add(
        AuditEvent(
            actor=actor,
            action=action,
            checkpoint_id=checkpoint_id,
            tier=tier,
            reason=reason,
            detail=detail,
        )
    )


def list_events(session: Session, *, checkpoint_id: int | None = None) -> list[AuditEvent]:
    """Events oldest first, of one checkpoint when ``checkpoint_id`` is given."""
    query = select(AuditEvent).order_by(AuditEvent.id)
    if checkpoint_id is not None:
        query = query.where(AuditEvent.checkpoint_id == checkpoint_id)
    return list(session.scalars(query))


def recent_events(
    session: Session, *, checkpoint_id: int | None = None, limit: int = 100, before: int | None = None
) -> list[AuditEvent]:
    """At most ``limit`` events newest first (of one checkpoint when given), older than id ``before``."""
    query = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit)
    if checkpoint_id is not None:
        query = query.where(AuditEvent.checkpoint_id == checkpoint_id)
    if before is not None:
        query = query.where(AuditEvent.id < before)
    return list(session.scalars(query))
