"""Tiers: what each holds and how full it is, and reservations of room before a save."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from tierd.api.bounds import TierName
from tierd.api.deps import ContextDep, Operator, Reader
from tierd.api.problems import ProblemRoute, problem, problem_responses
from tierd.api.schemas.tiers import ReservationIn, ReservationOut, TierOut
from tierd.daemon.context import BlockedView
from tierd.daemon.tierview import tier_views
from tierd.errors import NotFound, ShuttingDown

__all__ = ["router"]

router = APIRouter(prefix="/v1/tiers", tags=["tiers"], route_class=ProblemRoute)


@router.get("", operation_id="listTiers")
async def list_tiers(ctx: ContextDep, _caller: Reader) -> list[TierOut]:
    """Every tier in order: kind, durability, policy, space (POSIX), replicas by state, recovery point."""
    return [TierOut.model_validate(view, from_attributes=True) for view in await tier_views(ctx)]


@router.post(
    "/{tier}/reservations",
    operation_id="reserveSpace",
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
    room = await ctx.retention.reserve(tier, body.bytes)
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
