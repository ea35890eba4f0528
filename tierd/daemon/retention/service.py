"""The retention service: applies each tier's policy, runs due deletions, relieves disk pressure.

Every ``retention.interval`` (and when woken), one pass:

1. reads the catalog once and plans (``snapshot``: the pure planner over every live checkpoint);
2. schedules the plan's deletions (``deleting`` until now + the tier's ``delete_delay``) and
   gives back retention deletions the plan no longer wants, in one transaction;
3. runs the deletions that are due (``deleter``), each vetoed when the fresh plan keeps it;
4. evicts on POSIX tiers below their low mark (``pressure``).

On shared tiers only the fleet's leader schedules, cancels, deletes and evicts
(``Context.acts_on``, asked again right before each delete); node-local tiers are every
daemon's own.

With ``retention.dry_run`` a pass logs what it would schedule and touches nothing; due
deletions and eviction do not run either. A tier with no retention block keeps everything.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tierd.config import Config
from tierd.daemon.aio import blocking
from tierd.daemon.backends import Backend, Space
from tierd.daemon.catalog import replica_deletions
from tierd.daemon.catalog import retention as catalog_retention
from tierd.daemon.catalog.models import utcnow
from tierd.daemon.catalog.replica_deletions import DueDeletion, Origin
from tierd.daemon.context import Context
from tierd.daemon.outage import CatalogOutage
from tierd.daemon.retention.deleter import Deleter, Outcome
from tierd.daemon.retention.plan import Action, Verdict
from tierd.daemon.retention.pressure import Pressure, Room
from tierd.daemon.retention.snapshot import Snapshot, take_snapshot
from tierd.daemon.retention.store_holds import StoreHolds
from tierd.daemon.service import PassLoop
from tierd.logs import get_logger

__all__ = ["PassReport", "RetentionService"]

log = get_logger(__name__)
ACTOR = "retention"
#: A plan is made again at least this often even when nothing seems to have changed.
REPLAN_SECONDS = 600.0


@dataclass
class PassReport:
    """What one pass did."""

    scheduled: int = 0
    cancelled: int = 0
    outcomes: list[Outcome] = field(default_factory=list)
    dry_run: bool = False

    @property
    def deleted(self) -> int:
        """Replicas whose bytes this pass removed."""
        return sum(1 for o in self.outcomes if o.result == "deleted")


class RetentionService:
    """Runs retention passes (see the module docstring)."""

    name = "retention"

    def __init__(self, ctx: Context, backends: Mapping[str, Backend]) -> None:
        self.ctx = ctx
        self.config = ctx.config
        self.deleter = Deleter(
            ctx.config, ctx.db, backends, ctx.metrics, on_bad_copy=ctx.wake_pipeline, acts_on=ctx.acts_on
        )
        self.pressure = Pressure(ctx.config, ctx.db, backends, self.deleter, ctx.metrics, self.snapshot)
        self._pass_lock = asyncio.Lock()
        self.outage = CatalogOutage(self.name)
        ctx.outages[self.name] = self.outage
        self.loop = PassLoop(self.name, self._pass, self.config.retention.interval, outage=self.outage)
        self.store_holds = StoreHolds(ctx, backends, self.config.retention.interval)
        self._woken = False
        self._last_marker: tuple[object, ...] | None = None
        self._replan_at: datetime | None = None
        self._dry_logged: set[tuple[int, str]] = set()

    def snapshot(self, now: datetime | None = None) -> Snapshot:
        """The catalog planned now (blocking); in a fleet, node-local tiers hold this node's checkpoints."""
        return take_snapshot(
            self.ctx.db,
            self.deleter.rules,
            now or utcnow(),
            node=self.deleter.node,
            node_local=self.deleter.node_local,
        )

    async def start(self) -> None:
        """Start the pass loop, and tell the log what each tier keeps."""
        for tier, rules in zip(self.config.tiers, self.deleter.rules, strict=True):
            log.info(
                "retention_tier",
                tier=tier.name,
                durable=tier.durable,
                policy=rules.policy.name,
                delete_delay_seconds=tier.delete_delay,
                dry_run=self.config.retention.dry_run,
            )
        await self.store_holds.start()
        self.ctx.retention = self
        self.loop.start("retention:loop")

    async def _pass(self) -> None:
        await self.run_pass()

    async def run_pass(self, now: datetime | None = None) -> PassReport:
        """One pass (see the module docstring); passes never overlap.

        The plan is made again only when the catalog changed since the last one (its
        ``change_marker``), a ``keep_within`` window moved past a checkpoint, the service
        was woken, or ``REPLAN_SECONDS`` passed: an idle daemon reads one row per pass.
        """
        async with self._pass_lock:
            now = now or utcnow()
            report = PassReport(dry_run=self.config.retention.dry_run)
            marker = await blocking(self._marker)
            snap = None
            if self._stale(marker, now):
                snap = await blocking(self.snapshot, now)
                self._planned(marker, snap, now)
                if report.dry_run:
                    self._dry_run(snap)
                else:
                    report.scheduled, report.cancelled = await blocking(self._apply, snap, now)
                    if report.scheduled or report.cancelled:
                        snap = None  # the plan's own changes: the veto reads a fresh one
            if report.dry_run:
                return report
            due = await blocking(self.deleter.due, now)
            if due:
                fresh = snap if snap is not None else await blocking(self.snapshot, now)
                report.outcomes = await self.deleter.run(due, now, veto=functools.partial(_veto, fresh))
            await self.pressure.relieve_all()
            self._log(report)
            return report

    def _marker(self) -> tuple[object, ...]:
        with self.ctx.db.read_session() as session:
            return catalog_retention.change_marker(session)

    def _stale(self, marker: tuple[object, ...], now: datetime) -> bool:
        woken, self._woken = self._woken, False
        return woken or marker != self._last_marker or self._replan_at is None or now >= self._replan_at

    def _planned(self, marker: tuple[object, ...], snap: Snapshot, now: datetime) -> None:
        self._last_marker = marker
        self._replan_at = min(
            now + timedelta(seconds=REPLAN_SECONDS), _next_window_edge(snap, self.config, now)
        )

    def reconfigure(self, config: Config) -> None:
        """Take a reload's tier rules, delete delays and ``dry_run``.

        They apply from the next pass (woken now), whose plan also gives back the deletions the
        new rules no longer want.
        """
        self.config = self.pressure.config = config
        self.deleter.reconfigure(config)
        self.wake()

    def wake(self) -> None:
        """Plan again now (a pin, hold, metric or delete changed what retention decides)."""
        self._woken = True
        self.loop.wake()
        self.store_holds.wake()

    def _log(self, report: PassReport) -> None:
        if report.scheduled or report.outcomes:
            log.info(
                "retention_pass",
                scheduled=report.scheduled,
                cancelled=report.cancelled,
                deleted=report.deleted,
                refused=sum(o.result == "refused" for o in report.outcomes),
            )

    async def space(self, tier: str) -> Space | None:
        """The tier's size and free bytes now (None for stores that do not fill up).

        Raises TierdError when the tier cannot be read (an unmounted file system).
        """
        return await self.pressure.space(tier)

    @property
    def blocked(self) -> dict[str, str]:
        """The tiers whose disk pressure is stuck (below the low mark, nothing evictable), and why."""
        return {
            tier: state.blocked for tier, state in self.pressure.state.items() if state.blocked is not None
        }

    async def reserve(self, tier: str, nbytes: int) -> Room:
        """Make ``nbytes`` plus the tier's low mark free, evicting what it safely can.

        Raises NotFound for a tier that is not a POSIX tier of this daemon.
        """
        return await self.pressure.reserve(tier, nbytes)

    def _apply(self, snap: Snapshot, now: datetime) -> tuple[int, int]:
        """Schedule the plan's new deletions and cancel the ones it dropped, in one transaction."""
        delays = {t.name: timedelta(seconds=t.delete_delay) for t in self.config.tiers}
        items = [
            replica_deletions.Scheduled(v.checkpoint_id, v.tier, now + delays[v.tier], v.reason, v.policy)
            for v in snap.plan.deletions()
            if v.schedules_deletion and self.ctx.acts_on(v.tier)
        ]
        cancelled = 0
        with self.ctx.db.session() as session:
            scheduled = len(
                replica_deletions.schedule_replica_deletions(
                    session, items, origin=Origin.RETENTION, actor=ACTOR
                )
            )
            for verdict in snap.plan.cancellations():
                if self.ctx.acts_on(verdict.tier) and replica_deletions.cancel_retention_deletion(
                    session, verdict.checkpoint_id, verdict.tier, reason=verdict.reason, actor=ACTOR
                ):
                    cancelled += 1
        return scheduled, cancelled

    def _dry_run(self, snap: Snapshot) -> None:
        """Log what would be scheduled: each decision once, and a count per tier every plan."""
        would = {(v.checkpoint_id, v.tier): v for v in snap.plan.deletions() if v.schedules_deletion}
        for key in would.keys() - self._dry_logged:
            verdict = would[key]
            log.info(
                "retention_dry_run_would_delete",
                checkpoint=verdict.checkpoint_id,
                tier=verdict.tier,
                policy=verdict.policy,
                reason=verdict.reason,
            )
        self._dry_logged = set(would)
        counts = {
            t.name: sum(1 for tier in (k[1] for k in would) if tier == t.name) for t in self.config.tiers
        }
        log.info("retention_dry_run", would_delete=counts)

    async def stop(self, timeout: float) -> None:
        """Stop the loop; a deletion under way may finish within ``timeout``, else resumes after restart."""
        if await self.loop.stop(timeout):
            log.info("retention_cut", detail="a pass was cut; begun deletions finish after restart")
        await self.store_holds.stop(timeout)


def _veto(snap: Snapshot, due: DueDeletion) -> str | None:
    """Why a due deletion must not run now, by the fresh plan; None when it may."""
    checkpoint = snap.by_id(due.checkpoint_id)
    if checkpoint is None:
        return None  # the checkpoint row is gone: nothing protects its bytes any more
    if due.origin is Origin.RETENTION:
        verdict: Verdict | None = snap.plan.verdict(due.checkpoint_id, due.tier)
        if verdict is not None and verdict.action is not Action.DELETE:
            return verdict.reason
        return None
    if due.origin is Origin.EVICTION:
        blocks = snap.protections[due.checkpoint_id]
        return "; ".join(b.reason for b in blocks) or None
    return None  # an operator's deletion: the deleter still refuses pinned or held checkpoints


def _next_window_edge(snap: Snapshot, config: Config, now: datetime) -> datetime:
    """The first moment a ``keep_within`` window stops covering a checkpoint (far off if none)."""
    edge = now + timedelta(days=3650)
    windows = [t.retention.keep_within for t in config.tiers if t.retention.keep_within is not None]
    if not windows:
        return edge
    for checkpoint in snap.checkpoints:
        if checkpoint.facts.complete:
            for seconds in windows:
                leaves = checkpoint.facts.finished_at + timedelta(seconds=seconds)
                if now < leaves < edge:
                    edge = leaves
    return edge
