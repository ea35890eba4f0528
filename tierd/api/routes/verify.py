"""Verify a checkpoint now: every replica re-checked, a bad one marked failed and copied again."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from tierd.api.deps import ContextDep, Operator
from tierd.api.problems import ProblemRoute, problem_responses
from tierd.api.schemas import INTEGER_MAX, VerifiedFileOut, VerifyOut, VerifyTierOut
from tierd.daemon.scrub import CheckOutcome
from tierd.errors import CatalogError, NotFound, ShuttingDown

__all__ = ["router"]

router = APIRouter(prefix="/v1/checkpoints", tags=["checkpoints"], route_class=ProblemRoute)
CheckpointId = Annotated[int, Path(ge=0, le=INTEGER_MAX)]
#: Results that leave nothing in doubt about the replicas checked.
GOOD = frozenset({"ok", "skipped", "gone"})


@router.post("/{checkpoint_id}/verify", responses=problem_responses(NotFound, ShuttingDown, CatalogError))
async def verify(ctx: ContextDep, caller: Operator, checkpoint_id: CheckpointId) -> VerifyOut:
    """Re-check every verified replica of the checkpoint now and answer per tier.

    ``ok``, ``mismatch`` or ``missing`` (with the files), ``inconclusive`` (the store did
    not answer), ``gone`` (deleted while checked) or ``skipped`` (not verified, or on
    another node's own tier). A bad replica is handled as a scrub's: marked failed,
    audited, and copied again from a good copy on another tier.
    """
    if ctx.scrub is None:
        raise ShuttingDown("the scrubber is not running: nothing can be verified")
    outcomes = await ctx.scrub.verify(checkpoint_id, actor=f"api:{caller}")
    tiers = [_tier_out(o) for o in outcomes]
    return VerifyOut(checkpoint_id=checkpoint_id, ok=all(t.result in GOOD for t in tiers), tiers=tiers)


def _tier_out(outcome: CheckOutcome) -> VerifyTierOut:
    files = [
        VerifiedFileOut(
            file=b.relpath, problem=b.problem, expected=b.expected, actual=b.actual, detail=b.detail
        )
        for b in outcome.bad
    ]
    return VerifyTierOut(tier=outcome.tier, result=outcome.result, files=files, detail=outcome.detail)
