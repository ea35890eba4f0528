"""What is in flight (``GET /v1/jobs``): copies, deletions and restores."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from tierd.api.schemas.restores import RestoreOut

__all__ = [
    "CopyJobOut",
    "DeletionOut",
    "JobsOut",
]


class CopyJobOut(BaseModel):
    """A copy between tiers, queued or running."""

    id: int
    checkpoint_id: int
    run: str
    step: int
    src_tier: str | None
    dst_tier: str | None
    state: str
    attempts: int
    bytes_done: int
    bytes_total: int
    error: str | None


class DeletionOut(BaseModel):
    """A replica in ``deleting``: removed once ``delete_after`` passes (or now, when it is None)."""

    checkpoint_id: int
    run: str
    step: int
    tier: str
    delete_after: datetime | None
    reason: str | None


class JobsOut(BaseModel):
    """What is in flight: copies, deletions and restores."""

    copies: list[CopyJobOut]
    deletions: list[DeletionOut]
    restores: list[RestoreOut]
