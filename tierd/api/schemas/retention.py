"""Retention: the plan, per tier, of what is kept, deleted and blocked (``GET /v1/retention/plan``)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

__all__ = [
    "PlanItem",
    "PlanOut",
    "TierPlan",
]


class PlanItem(BaseModel):
    """One replica's verdict: kept (by which policy), deleted (why) or blocked (why)."""

    checkpoint_id: int
    run: str
    step: int
    replica_state: str
    action: Literal["keep", "delete", "blocked"]
    policy: str
    reason: str
    backing_tier: str | None = Field(description="deletes: the durable tier re-checked before it")


class TierPlan(BaseModel):
    """The plan of one tier."""

    tier: str
    durable: bool
    policy: str
    delete_delay_seconds: float
    counts: dict[str, int] = Field(description="replicas by action")
    items: list[PlanItem]


class PlanOut(BaseModel):
    """What retention would do now, per tier (``GET /v1/retention/plan``)."""

    generated_at: datetime
    dry_run: bool
    tiers: list[TierPlan]
