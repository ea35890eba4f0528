"""Runs: what a training job asks at start-up to resume (its newest complete, verified, durable step)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from tierd.api.bounds import RunName, TierName
from tierd.api.deps import ContextDep, Reader, ReadSessionDep
from tierd.api.problems import ProblemRoute, problem_responses
from tierd.api.schemas.checkpoints import CheckpointOut
from tierd.api.schemas.runs import RunOut, RunPage, RunTierOut
from tierd.daemon.catalog import checkpoints as queries
from tierd.daemon.catalog.runs import latest_checkpoint, run_summaries
from tierd.errors import NotFound

__all__ = ["router"]

router = APIRouter(prefix="/v1/runs", tags=["runs"], route_class=ProblemRoute)
RunPath = Annotated[RunName, Path()]


@router.get("", operation_id="listRuns")
def list_runs(ctx: ContextDep, session: ReadSessionDep, _caller: Reader) -> RunPage:
    """Every run by name: its checkpoints, newest complete step, and newest verified step per tier."""
    configured = [t.name for t in ctx.config.tiers]
    items = []
    for summary in run_summaries(session):
        tiers = configured + sorted(set(summary.newest_verified_step) - set(configured))
        items.append(
            RunOut(
                run=summary.run,
                checkpoints=summary.checkpoints,
                newest_step=summary.newest_step,
                newest_checkpoint_id=summary.newest_checkpoint_id,
                tiers={
                    t: RunTierOut(newest_verified_step=summary.newest_verified_step.get(t)) for t in tiers
                },
            )
        )
    return RunPage(items=items)


# ``:path`` lets a run name hold a "/" (sent as %2F): the run is everything before "/latest".
@router.get(
    "/{run:path}/latest",
    operation_id="getLatestStep",
    responses=problem_responses(404, description="no such run or tier, or no step that qualifies"),
)
def latest(
    ctx: ContextDep,
    session: ReadSessionDep,
    _caller: Reader,
    run: RunPath,
    tier: Annotated[TierName | None, Query(description="verified on this tier")] = None,
    durable: Annotated[bool, Query(description="verified on some durable tier")] = False,
) -> CheckpointOut:
    """The run's newest complete step: verified on ``tier``, and/or on a durable tier, when asked."""
    names = [t.name for t in ctx.config.tiers]
    if tier is not None and tier not in names:
        raise NotFound(f"no tier named {tier!r}")
    wanted: set[str] | None = None
    if tier is not None:
        wanted = {tier}
    if durable:
        durable_tiers = {t.name for t in ctx.config.tiers if t.durable}
        wanted = durable_tiers if wanted is None else wanted & durable_tiers
        if not wanted:
            raise NotFound(f"tier {tier!r} is not durable")
    checkpoint_id = latest_checkpoint(session, run, tiers=wanted)
    return CheckpointOut.of(queries.load_checkpoint(session, checkpoint_id), None)  # complete: lacks nothing
