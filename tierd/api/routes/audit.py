"""The audit log: every pin, hold, deletion, eviction and refusal, with who, when and why."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from tierd.api.deps import Reader, ReadSessionDep
from tierd.api.problems import ProblemRoute
from tierd.api.schemas.audit import AuditOut, AuditPage
from tierd.api.schemas.common import INTEGER_MAX
from tierd.daemon.catalog.audit import recent_events

__all__ = ["router"]

router = APIRouter(prefix="/v1/audit", tags=["audit"], route_class=ProblemRoute)


@router.get("", operation_id="listAuditEvents")
def list_audit(
    session: ReadSessionDep,
    _caller: Reader,
    checkpoint_id: Annotated[int | None, Query(ge=1, le=INTEGER_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before: Annotated[
        int | None, Query(ge=1, le=INTEGER_MAX, description="events older than this id")
    ] = None,
) -> AuditPage:
    """Audit events newest first, of one checkpoint when asked; ``next_before`` pages on."""
    rows = recent_events(session, checkpoint_id=checkpoint_id, limit=limit + 1, before=before)
    items = [AuditOut.model_validate(r, from_attributes=True) for r in rows[:limit]]
    return AuditPage(items=items, next_before=items[-1].id if len(rows) > limit else None)
