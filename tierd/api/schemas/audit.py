"""The audit log: who did what to which checkpoint, when and why."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

__all__ = [
    "AuditOut",
    "AuditPage",
]


class AuditOut(BaseModel):
    """One audit event: who did what to which checkpoint, when and why."""

    id: int
    at: datetime
    actor: str
    action: str
    checkpoint_id: int | None
    tier: str | None
    reason: str
    detail: dict[str, Any]


class AuditPage(BaseModel):
    """Audit events newest first; pass ``next_before`` as ``before`` for the next page."""

    items: list[AuditOut]
    next_before: int | None
