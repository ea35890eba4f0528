"""Retention: the plan, per tier, of what is kept (by which policy), deleted (why) and blocked (why)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from tierd.api.bounds import RunName, TierName
from tierd.api.deps import ContextDep, Reader
from tierd.api.problems import ProblemRoute
from tierd.api.schemas.retention import PlanOut
from tierd.daemon.aio import blocking
from tierd.daemon.retention.plan import Action
from tierd.daemon.retention.view import plan_view

__all__ = ["router"]

router = APIRouter(prefix="/v1/retention", tags=["retention"], route_class=ProblemRoute)
ActionName = Annotated[Action | None, Query(description="only this action")]


@router.get("/plan", operation_id="getRetentionPlan")
async def plan(
    ctx: ContextDep,
    _caller: Reader,
    tier: Annotated[TierName | None, Query(description="only this tier")] = None,
    run: Annotated[RunName | None, Query(description="only this run")] = None,
    action: ActionName = None,
) -> PlanOut:
    """A dry run: what each tier's retention would keep, delete and leave blocked now, and why."""
    view = await blocking(plan_view, ctx.db, ctx.config, tier=tier, run=run, action=action)
    return PlanOut.model_validate(view, from_attributes=True)
