"""Tiers: what each holds and how full it is, and reservations of room before a save."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from tierd.api.bounds import TierName
from tierd.api.deps import ContextDep, Operator, Reader
from tierd.api.problems import ProblemRoute, problem, problem_responses
from tierd.api.schemas import FreeSpaceOut, ReservationIn, ReservationOut, ScrubOut, TierOut
from tierd.config import PosixTier, TierConfig
from tierd.daemon.aio import blocking
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.scrub import ScrubProgress, scrub_progress
from tierd.daemon.catalog.stats import ReplicaStats, replica_stats
from tierd.daemon.context import BlockedView, Context
from tierd.daemon.retention.state import tier_rules
from tierd.errors import NotFound, ShuttingDown, TierdError

__all__ = ["router"]

router = APIRouter(prefix="/v1/tiers", tags=["tiers"], route_class=ProblemRoute)


@router.get("")
async def list_tiers(ctx: ContextDep, _caller: Reader) -> list[TierOut]:
    """Every tier in order: kind, durability, policy, space (POSIX), replicas by state, recovery point."""
    stats = await blocking(replica_stats, ctx.db)
    policies = {r.name: r.policy.name for r in tier_rules(ctx.config)}
    return [await _tier_out(ctx, tier, stats, policies[tier.name]) for tier in ctx.config.tiers]


async def _tier_out(ctx: Context, tier: TierConfig, stats: ReplicaStats, policy: str) -> TierOut:
    size = free = used = None
    blocked = None
    if ctx.retention is not None:
        try:
            space = await ctx.retention.pressure.space(tier.name)
        except TierdError:
            space = None  # an unmounted tier: shown without sizes, never an error for the whole list
        if space is not None:
            size, free, used = space.total, space.free, space.total - space.free
        state = ctx.retention.pressure.state.get(tier.name)
        blocked = state.blocked if state is not None else None
    marks = tier.free_space if isinstance(tier, PosixTier) else None
    newest = next((v.newest_created_at for v in stats.verified if v.tier == tier.name), None)
    return TierOut(
        name=tier.name,
        kind=tier.kind,
        durable=tier.durable,
        policy=policy,
        delete_delay_seconds=tier.delete_delay,
        size_bytes=size,
        free_bytes=free,
        used_bytes=used,
        free_space=FreeSpaceOut(evict_below=str(marks.evict_below), evict_to=str(marks.evict_to))
        if marks
        else None,
        pressure_blocked=blocked,
        replicas={state: n for (t, state), n in stats.counts.items() if t == tier.name},
        newest_verified_age_seconds=(datetime.now(UTC) - newest).total_seconds() if newest else None,
        scrub=await _scrub_out(ctx, tier),
    )


async def _scrub_out(ctx: Context, tier: TierConfig) -> ScrubOut | None:
    """The tier's scrub settings and progress, or None when it is not scrubbed."""
    if tier.scrub is None:
        return None
    now = datetime.now(UTC)
    since = now - timedelta(seconds=tier.scrub.every)
    node = None if tier.shared else ctx.config.node
    progress = await blocking(_scrub_progress, ctx.db, tier.name, since, node)
    oldest = progress.oldest_check
    return ScrubOut(
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


@router.post(
    "/{tier}/reservations",
    response_model=ReservationOut,
    responses={
        **problem_responses(NotFound, ShuttingDown),
        **problem_responses(409, description="not enough room can be made: what blocks it is in blocked"),
    },
)
async def reserve(
    ctx: ContextDep, _caller: Operator, tier: TierName, body: ReservationIn
) -> ReservationOut | JSONResponse:
    """Make room for a save: evict what may safely go until ``bytes`` plus the low mark are free.

    200 when the room is there; 409 with what blocks it otherwise (nothing is deleted that is
    not verified on another durable tier).
    """
    if ctx.retention is None:
        raise ShuttingDown("retention is not running: no room can be made")
    room = await ctx.retention.pressure.reserve(tier, body.bytes)
    if not room.ok:
        return problem(
            409,
            f"tier {tier}: {room.describe()}",
            title="Not enough room",
            free_bytes=room.space.free,
            wanted_free_bytes=room.target_free,
            evicted=list(room.evicted),
            blocked=[_blocked(b) for b in room.blocked],
        )
    return ReservationOut(
        tier=tier,
        free_bytes=room.space.free,
        wanted_free_bytes=room.target_free,
        evicted=list(room.evicted),
        evicted_bytes=room.evicted_bytes,
    )


def _blocked(b: BlockedView) -> dict[str, object]:
    return {"reason": b.reason, "blocker": b.blocker.value, "checkpoints": b.checkpoints, "bytes": b.bytes}
