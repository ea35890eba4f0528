"""Retention: the plan, per tier, of what is kept (by which policy), deleted (why) and blocked (why)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from tierd.api.bounds import RunName, TierName
from tierd.api.deps import ContextDep, Reader
from tierd.api.problems import ProblemRoute
from tierd.api.schemas import PlanItem, PlanOut, TierPlan
from tierd.daemon.aio import blocking
from tierd.daemon.catalog.models import utcnow
from tierd.daemon.retention.plan import Action, Verdict
from tierd.daemon.retention.snapshot import Snapshot, take_snapshot
from tierd.daemon.retention.state import tier_rules

__all__ = ["router"]

router = APIRouter(prefix="/v1/retention", tags=["retention"], route_class=ProblemRoute)
ActionName = Annotated[Action | None, Query(description="only this action")]


@router.get("/plan")
async def plan(
    ctx: ContextDep,
    _caller: Reader,
    tier: Annotated[TierName | None, Query(description="only this tier")] = None,
    run: Annotated[RunName | None, Query(description="only this run")] = None,
    action: ActionName = None,
) -> PlanOut:
    """A dry run: what each tier's retention would keep, delete and leave blocked now, and why."""
    now = utcnow()
    snap = await blocking(take_snapshot, ctx.db, tier_rules(ctx.config), now)
    tiers = [
        _tier_plan(snap, t.name, t.durable, t.delete_delay, run=run, action=action)
        for t in ctx.config.tiers
        if tier is None or t.name == tier
    ]
    return PlanOut(generated_at=now, dry_run=ctx.config.retention.dry_run, tiers=tiers)


def _tier_plan(
    snap: Snapshot, tier: str, durable: bool, delay: float, *, run: str | None, action: Action | None
) -> TierPlan:
    verdicts = snap.plan.for_tier(tier)
    counts = {a.value: sum(1 for v in verdicts if v.action is a) for a in Action}
    items = [_item(snap, v) for v in verdicts if action is None or v.action is action]
    if run is not None:
        items = [i for i in items if i.run == run]
    rules = next(r for r in snap.plan.tiers if r.name == tier)
    return TierPlan(
        tier=tier,
        durable=durable,
        policy=rules.policy.name,
        delete_delay_seconds=delay,
        counts=counts,
        items=items,
    )


def _item(snap: Snapshot, verdict: Verdict) -> PlanItem:
    checkpoint = snap.by_id(verdict.checkpoint_id)
    assert checkpoint is not None
    return PlanItem(
        checkpoint_id=verdict.checkpoint_id,
        run=checkpoint.facts.run,
        step=checkpoint.facts.step,
        replica_state=verdict.state.value,
        action=verdict.action.value,
        policy=verdict.policy,
        reason=verdict.reason,
        backing_tier=verdict.backing_tier,
    )
