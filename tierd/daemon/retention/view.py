"""What ``GET /v1/retention/plan`` shows: per tier, each replica kept, deleted or blocked, and why.

A dry run: the catalog read once and planned (``snapshot``), nothing changed. Built here;
the route only serialises it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import utcnow
from tierd.daemon.retention.plan import Action, Verdict
from tierd.daemon.retention.snapshot import Snapshot, take_snapshot
from tierd.daemon.retention.state import tier_rules

__all__ = ["PlanItemView", "PlanView", "TierPlanView", "plan_view"]


@dataclass(frozen=True)
class PlanItemView:
    """One replica's verdict: its action, the policy behind it, and why."""

    checkpoint_id: int
    run: str
    step: int
    replica_state: str
    action: str
    policy: str
    reason: str
    #: Deletes: the durable tier re-checked right before the delete.
    backing_tier: str | None


@dataclass(frozen=True)
class TierPlanView:
    """The plan of one tier: its settings, its replicas counted by action, and the items asked for."""

    tier: str
    durable: bool
    policy: str
    delete_delay_seconds: float
    counts: dict[str, int]
    items: list[PlanItemView]


@dataclass(frozen=True)
class PlanView:
    """What retention would do now, per tier."""

    generated_at: datetime
    dry_run: bool
    tiers: list[TierPlanView]


def plan_view(
    db: Database,
    config: Config,
    *,
    tier: str | None = None,
    run: str | None = None,
    action: Action | None = None,
) -> PlanView:
    """The plan now (blocking), of every tier or only ``tier``.

    ``run`` and ``action`` keep only those items (the counts are the tier's whole). Raises
    CatalogError when the catalog fails.
    """
    now = utcnow()
    snap = take_snapshot(db, tier_rules(config), now)
    tiers = [
        _tier_plan(snap, t.name, t.durable, t.delete_delay, run=run, action=action)
        for t in config.tiers
        if tier is None or t.name == tier
    ]
    return PlanView(generated_at=now, dry_run=config.retention.dry_run, tiers=tiers)


def _tier_plan(
    snap: Snapshot, tier: str, durable: bool, delay: float, *, run: str | None, action: Action | None
) -> TierPlanView:
    verdicts = snap.plan.for_tier(tier)
    counts = {a.value: sum(1 for v in verdicts if v.action is a) for a in Action}
    items = [_item(snap, v) for v in verdicts if action is None or v.action is action]
    if run is not None:
        items = [i for i in items if i.run == run]
    rules = next(r for r in snap.plan.tiers if r.name == tier)
    return TierPlanView(
        tier=tier,
        durable=durable,
        policy=rules.policy.name,
        delete_delay_seconds=delay,
        counts=counts,
        items=items,
    )


def _item(snap: Snapshot, verdict: Verdict) -> PlanItemView:
    checkpoint = snap.by_id(verdict.checkpoint_id)
    assert checkpoint is not None
    return PlanItemView(
        checkpoint_id=verdict.checkpoint_id,
        run=checkpoint.facts.run,
        step=checkpoint.facts.step,
        replica_state=verdict.state.value,
        action=verdict.action.value,
        policy=verdict.policy,
        reason=verdict.reason,
        backing_tier=verdict.backing_tier,
    )
