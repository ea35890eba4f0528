"""Usage: what each tier holds and costs, what retention saved, and a 30-day projection."""

from __future__ import annotations

from dataclasses import asdict
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Query

from tierd.api.deps import ContextDep, Reader, ReadSessionDep
from tierd.api.problems import ProblemRoute
from tierd.api.schemas.usage import UsageOut
from tierd.daemon.catalog.models import utcnow
from tierd.daemon.usage import usage_view

__all__ = ["router"]

router = APIRouter(prefix="/v1/usage", tags=["usage"], route_class=ProblemRoute)


@router.get("", operation_id="getUsage")
def get_usage(
    ctx: ContextDep,
    session: ReadSessionDep,
    _caller: Reader,
    cadence_days: Annotated[
        int, Query(ge=1, le=90, description="days the save cadence is measured over")
    ] = 7,
    runs: Annotated[int, Query(ge=0, le=1000, description="how many of the biggest runs to list")] = 50,
) -> UsageOut:
    """Bytes and monthly cost per tier, storage class and run; retention's savings; in 30 days.

    Aggregated in the catalog (a row per tier, per listed run, per run that saved in the
    window), whatever the number of checkpoints.
    """
    view = usage_view(session, ctx.config, utcnow(), cadence_days=cadence_days, runs=runs)
    return UsageOut.model_validate(_plain(asdict(view)))


def _plain(value: Any) -> Any:
    """``value`` with each Decimal a float rounded to 1/10,000 (money in JSON)."""
    if isinstance(value, Decimal):
        return round(float(value), 4)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
