"""Checkpoints: list and inspect them, and record one a training job announces (notify)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from tierd.api.deps import ContextDep, Operator, Reader, ReadSessionDep
from tierd.api.problems import ProblemRoute, problem_responses
from tierd.api.schemas import (
    BIGINT_MAX,
    INTEGER_MAX,
    NO_NUL,
    CheckpointDetail,
    CheckpointOut,
    CheckpointPage,
    NotifyIn,
)
from tierd.daemon.aio import blocking
from tierd.daemon.catalog import checkpoints as queries
from tierd.daemon.catalog.db import Database
from tierd.daemon.detect.notify import notify_checkpoint
from tierd.errors import CatalogError, NotFound

__all__ = ["router"]

router = APIRouter(prefix="/v1/checkpoints", tags=["checkpoints"], route_class=ProblemRoute)
CheckpointId = Annotated[int, Path(ge=0, le=INTEGER_MAX)]


@router.get("")
def list_checkpoints(
    session: ReadSessionDep,
    _caller: Reader,
    run: Annotated[str | None, Query(max_length=255, pattern=NO_NUL)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0, le=BIGINT_MAX)] = 0,
) -> CheckpointPage:
    """Checkpoints newest first, optionally of one run, a page at a time."""
    rows, total = queries.list_checkpoints(session, run=run, limit=limit, offset=offset)
    next_offset = offset + limit if offset + limit < total else None
    return CheckpointPage(
        items=[CheckpointOut.of(r) for r in rows],
        total=total,
        limit=limit,
        offset=offset,
        next_offset=next_offset,
    )


@router.get("/{checkpoint_id}", responses=problem_responses(NotFound))
def get_checkpoint(session: ReadSessionDep, _caller: Reader, checkpoint_id: CheckpointId) -> CheckpointDetail:
    """One checkpoint with its replicas and its files' checksums."""
    return CheckpointDetail.of(queries.get_checkpoint(session, checkpoint_id))


def _out(db: Database, checkpoint_id: int) -> CheckpointOut:
    with db.read_session() as session:
        return CheckpointOut.of(queries.load_checkpoint(session, checkpoint_id))


@router.post(
    "",
    status_code=201,
    responses={
        200: {"description": "already recorded", "model": CheckpointOut},
        202: {"description": "recorded as waiting: the detector does not agree yet", "model": CheckpointOut},
        **problem_responses(422, description="path outside tier 0, missing, or a malformed body"),
        **problem_responses(CatalogError),
    },
)
async def notify(body: NotifyIn, ctx: ContextDep, caller: Operator, response: Response) -> CheckpointOut:
    """Record a step now (201), return it if already recorded (200), or record it waiting (202)."""
    result = await notify_checkpoint(
        ctx, run=body.run, step=body.step, path=body.path, fmt=body.format, actor=f"api:{caller}"
    )
    response.status_code = result.status
    return await blocking(_out, ctx.db, result.checkpoint_id)
