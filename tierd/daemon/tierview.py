"""What ``GET /v1/tiers`` shows of each tier: what it is, how full, what it holds, its scrub.

Built here from the config, the catalog's totals and the running services (retention's
space and disk pressure, the scrubber's last pass, a POSIX tier's io_mode in force); the
route only serialises it. A tier whose space cannot be read (unmounted) is shown without
sizes: never an error for the list.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tierd.config import PosixTier, TierConfig
from tierd.daemon.aio import blocking
from tierd.daemon.backends.posix import iomode
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.scrub import ScrubProgress, scrub_progress
from tierd.daemon.catalog.stats import ReplicaStats, replica_stats
from tierd.daemon.context import Context
from tierd.daemon.retention.state import tier_rules
from tierd.errors import TierdError

__all__ = ["FreeSpaceMarks", "ScrubView", "TierView", "tier_views"]


@dataclass(frozen=True)
class FreeSpaceMarks:
    """A POSIX tier's disk-pressure marks, as configured (``10%``, ``50GiB``)."""

    evict_below: str
    evict_to: str


@dataclass(frozen=True)
class ScrubView:
    """A tier's scrub: its settings, and how far it is."""

    every: float
    bandwidth: int
    checked: int
    total: int
    oldest_unchecked_age_seconds: float | None
    last_pass_at: datetime | None


@dataclass(frozen=True)
class TierView:
    """One tier as the API shows it."""

    name: str
    kind: str
    durable: bool
    policy: str
    delete_delay_seconds: float
    size_bytes: int | None
    free_bytes: int | None
    used_bytes: int | None
    free_space: FreeSpaceMarks | None
    #: Why disk pressure is stuck (below the low mark with nothing evictable), else None.
    pressure_blocked: str | None
    #: Replicas on the tier, by state.
    replicas: dict[str, int]
    newest_verified_age_seconds: float | None
    scrub: ScrubView | None
    #: A POSIX tier's way of writing big files in force (``direct`` or ``buffered``) and why;
    #: None before its first big write chose (``io_mode: auto`` measures then), and for other kinds.
    io_mode: str | None = None
    io_mode_reason: str | None = None


async def tier_views(ctx: Context) -> list[TierView]:
    """Every configured tier, in order; raises CatalogError when the catalog fails."""
    stats = await blocking(replica_stats, ctx.db)
    policies = {r.name: r.policy.name for r in tier_rules(ctx.config)}
    return [await _tier_view(ctx, tier, stats, policies[tier.name]) for tier in ctx.config.tiers]


async def _tier_view(ctx: Context, tier: TierConfig, stats: ReplicaStats, policy: str) -> TierView:
    size = free = used = None
    blocked = None
    if ctx.retention is not None:
        try:
            space = await ctx.retention.space(tier.name)
        except TierdError:
            space = None  # an unmounted tier: shown without sizes
        if space is not None:
            size, free, used = space.total, space.free, space.total - space.free
        blocked = ctx.retention.blocked.get(tier.name)
    marks = tier.free_space if isinstance(tier, PosixTier) else None
    newest = next((v.newest_created_at for v in stats.verified if v.tier == tier.name), None)
    chosen = iomode.current(tier.name, tier.path) if isinstance(tier, PosixTier) else None
    return TierView(
        name=tier.name,
        kind=tier.kind,
        durable=tier.durable,
        policy=policy,
        delete_delay_seconds=tier.delete_delay,
        size_bytes=size,
        free_bytes=free,
        used_bytes=used,
        free_space=FreeSpaceMarks(str(marks.evict_below), str(marks.evict_to)) if marks else None,
        pressure_blocked=blocked,
        replicas={state: n for (t, state), n in stats.counts.items() if t == tier.name},
        newest_verified_age_seconds=(datetime.now(UTC) - newest).total_seconds() if newest else None,
        scrub=await _scrub_view(ctx, tier),
        io_mode=chosen.mode if chosen else None,
        io_mode_reason=chosen.reason if chosen else None,
    )


async def _scrub_view(ctx: Context, tier: TierConfig) -> ScrubView | None:
    """The tier's scrub settings and progress, or None when it is not scrubbed."""
    if tier.scrub is None:
        return None
    now = datetime.now(UTC)
    since = now - timedelta(seconds=tier.scrub.every)
    node = None if tier.shared else ctx.config.node
    progress = await blocking(_scrub_progress, ctx.db, tier.name, since, node)
    oldest = progress.oldest_check
    return ScrubView(
        every=tier.scrub.every,
        bandwidth=int(tier.scrub.bandwidth),
        checked=progress.checked,
        total=progress.total,
        oldest_unchecked_age_seconds=(now - oldest).total_seconds() if oldest else None,
        last_pass_at=ctx.scrub.last_pass_at.get(tier.name) if ctx.scrub is not None else None,
    )


def _scrub_progress(db: Database, tier: str, since: datetime, node: str | None) -> ScrubProgress:
    with db.read_session() as session:
        return scrub_progress(session, tier, since, node=node)
