"""Verify a checkpoint now: every replica re-checked, a bad one marked failed and copied again.

``tier0-check`` asks only whether tier 0 still holds it (its files looked at, not read).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from tierd.api.deps import ContextDep, Operator, Reader
from tierd.api.problems import ProblemRoute, problem_responses
from tierd.api.schemas.common import INTEGER_MAX
from tierd.api.schemas.verify import Tier0CheckOut, VerifiedFileOut, VerifyOut, VerifyTierOut
from tierd.daemon.aio import blocking
from tierd.daemon.detect.presence import check_tier0
from tierd.daemon.transfer.recheck import CheckOutcome
from tierd.errors import CatalogError, NotFound, ShuttingDown

__all__ = ["router"]

router = APIRouter(prefix="/v1/checkpoints", tags=["checkpoints"], route_class=ProblemRoute)
CheckpointId = Annotated[int, Path(ge=0, le=INTEGER_MAX)]
#: Results that leave nothing in doubt about the replicas checked.
GOOD = frozenset({"ok", "skipped", "gone"})


@router.post(
    "/{checkpoint_id}/verify",
    operation_id="verifyCheckpoint",
    responses=problem_responses(NotFound, ShuttingDown, CatalogError),
)
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


@router.post(
    "/{checkpoint_id}/tier0-check",
    operation_id="checkTier0",
    responses=problem_responses(NotFound, CatalogError),
)
async def tier0_check(ctx: ContextDep, caller: Reader, checkpoint_id: CheckpointId) -> Tier0CheckOut:
    """Whether this node's tier 0 holds the checkpoint now, asked before using it in place.

    Each of its files there is looked at (``lstat``, nothing read: one call a file) for its
    recorded size. When one is not there, ``here`` is false (restore it from another tier) and
    the tier-0 replica is marked as the reconcile or a scrub would: ``deleted`` when the step's
    path is gone, ``failed`` otherwise, audited. The read role may ask: what it records is what
    the disk says, whoever asks.
    """
    found = await blocking(check_tier0, ctx.db, ctx.config, checkpoint_id, actor=f"api:{caller}")
    return Tier0CheckOut(
        checkpoint_id=found.checkpoint_id,
        tier=found.tier,
        here=found.here,
        state=found.state,
        location=found.location,
        reason=found.reason,
        missing=list(found.missing),
    )
