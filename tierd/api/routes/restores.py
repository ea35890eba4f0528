"""Restores: put a checkpoint back from the nearest verified copy, follow it, cancel it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query

from tierd.api.bounds import Reason
from tierd.api.deps import CallerRole, ContextDep, Operator, Reader, ReadSessionDep, role_at_least
from tierd.api.problems import ProblemRoute, problem_responses
from tierd.api.schemas.common import INTEGER_MAX
from tierd.api.schemas.restores import RestoreIn, RestoreOut, RestorePage, RestoreState
from tierd.daemon.aio import blocking
from tierd.daemon.catalog import restores as queries
from tierd.daemon.catalog.db import Database
from tierd.daemon.restore import requests
from tierd.daemon.restore.requests import RestoreRequest
from tierd.errors import NotFound

__all__ = ["router"]

router = APIRouter(prefix="/v1/restores", tags=["restores"], route_class=ProblemRoute)
RestoreId = Annotated[int, Path(ge=0, le=INTEGER_MAX)]
_REFUSED = (
    "a malformed body, or a target outside restore.allowed_roots, with '..', through a symlink "
    "leading out of them, or not empty (without overwrite)"
)
_OWNER_REFUSED = "an owner asked for by a token below restore.owner_role (admin by default)"


def _out(db: Database, job_id: int) -> RestoreOut:
    with db.read_session() as session:
        return RestoreOut.of(queries.get_restore(session, job_id))


@router.post(
    "",
    operation_id="createRestore",
    status_code=202,
    responses={
        **problem_responses(NotFound),
        **problem_responses(403, description=_OWNER_REFUSED),
        **problem_responses(409, description="nothing verified to restore from (or not on source_tier)"),
        **problem_responses(422, description=_REFUSED),
    },
)
async def create_restore(body: RestoreIn, ctx: ContextDep, caller: Operator, role: CallerRole) -> RestoreOut:
    """Queue a restore (202); follow it with ``GET /v1/restores/{id}``."""
    needed = ctx.config.restore.owner_role
    if body.owner is not None and not role_at_least(role, needed):
        raise HTTPException(
            403,
            f"owner: giving a restore to another owner needs the {needed} role (restore.owner_role); "
            f"token {caller!r} has {role}",
        )
    request = RestoreRequest(
        checkpoint_id=body.checkpoint_id,
        run=body.run,
        step=body.step,
        latest=body.latest,
        target=body.target,
        to_tier0=body.to == "tier0",
        files=body.files,
        ranks=body.ranks,
        node=body.node,
        source_tier=body.source_tier,
        overwrite=body.overwrite,
        owner=None if body.owner is None else (body.owner.uid, body.owner.gid),
    )
    job_id = await blocking(requests.request_restore, ctx.db, ctx.config, request, actor=f"api:{caller}")
    if ctx.restore is not None:
        ctx.restore.wake()
    return await blocking(_out, ctx.db, job_id)


@router.get("", operation_id="listRestores")
def list_restores(
    session: ReadSessionDep,
    _caller: Reader,
    state: Annotated[RestoreState | None, Query(description="only restores in this state")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> RestorePage:
    """Restores, newest first."""
    rows = queries.list_restores(session, states=[state] if state else [], limit=limit)
    return RestorePage(items=[RestoreOut.of(row) for row in rows])


@router.get("/{restore_id}", operation_id="getRestore", responses=problem_responses(NotFound))
def get_restore(session: ReadSessionDep, _caller: Reader, restore_id: RestoreId) -> RestoreOut:
    """One restore: state, source tier, progress, rate and ETA, and the files taken from another tier."""
    return RestoreOut.of(queries.get_restore(session, restore_id))


@router.delete(
    "/{restore_id}",
    operation_id="cancelRestore",
    responses={
        **problem_responses(NotFound),
        **problem_responses(409, description="the restore is done or failed"),
    },
)
async def cancel_restore(
    ctx: ContextDep,
    caller: Operator,
    restore_id: RestoreId,
    reason: Annotated[Reason, Query()] = "",
) -> RestoreOut:
    """Cancel the restore and remove what it wrote; a cancelled one is answered as it is."""
    actor, why = f"api:{caller}", reason or "cancelled through the API"
    if ctx.restore is not None:
        await ctx.restore.cancel(restore_id, actor=actor, reason=why)
    else:
        await blocking(
            requests.cancel_restore, ctx.db, ctx.config, restore_id, actor=actor, reason=why, clean=True
        )
    return await blocking(_out, ctx.db, restore_id)
