"""Checkpoints: list and inspect them, and record one a training job announces (notify)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from tierd.api.bounds import HOLD_NAME, Reason, RunName
from tierd.api.deps import Admin, ContextDep, Operator, Reader, ReadSessionDep, SessionDep
from tierd.api.problems import ProblemRoute, problem_responses
from tierd.api.schemas.checkpoints import (
    CheckpointDetail,
    CheckpointOut,
    CheckpointPage,
    HoldIn,
    MetricsIn,
    NodeLossOut,
    NotifyIn,
    PeerCopyOut,
    ReasonIn,
)
from tierd.api.schemas.common import BIGINT_MAX, INTEGER_MAX
from tierd.daemon.aio import blocking
from tierd.daemon.catalog import checkpoints as queries
from tierd.daemon.catalog import protection, replica_deletions
from tierd.daemon.catalog.db import Database, Session
from tierd.daemon.catalog.models import utcnow
from tierd.daemon.catalog.parts import Expectation, missing_while_waiting
from tierd.daemon.catalog.peer_copies import peer_copies_of, safe_since
from tierd.daemon.context import Context
from tierd.daemon.detect.notify import notify_checkpoint
from tierd.errors import CatalogError, Conflict, NotFound

__all__ = ["router"]

ReasonQuery = Annotated[Reason, Query()]
HoldName = Annotated[str, Path(pattern=HOLD_NAME)]

router = APIRouter(prefix="/v1/checkpoints", tags=["checkpoints"], route_class=ProblemRoute)
CheckpointId = Annotated[int, Path(ge=0, le=INTEGER_MAX)]


@router.get("", operation_id="listCheckpoints")
def list_checkpoints(
    session: ReadSessionDep,
    _caller: Reader,
    run: Annotated[RunName | None, Query()] = None,
    step: Annotated[int | None, Query(ge=0, le=BIGINT_MAX, description="only this step")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0, le=BIGINT_MAX)] = 0,
) -> CheckpointPage:
    """Checkpoints newest first, optionally of one run and one step, a page at a time."""
    rows, total = queries.list_checkpoints(session, run=run, step=step, limit=limit, offset=offset)
    next_offset = offset + limit if offset + limit < total else None
    return CheckpointPage(
        items=[CheckpointOut.of(r, missing_while_waiting(session, r)) for r in rows],
        total=total,
        limit=limit,
        offset=offset,
        next_offset=next_offset,
    )


@router.get("/{checkpoint_id}", operation_id="getCheckpoint", responses=problem_responses(NotFound))
def get_checkpoint(
    ctx: ContextDep, session: ReadSessionDep, _caller: Reader, checkpoint_id: CheckpointId
) -> CheckpointDetail:
    """One checkpoint with its replicas, its files' checksums, and whether one node's loss loses it."""
    row = queries.get_checkpoint(session, checkpoint_id)
    shared = [tier.name for tier in ctx.config.tiers if tier.shared]
    since = safe_since(session, checkpoint_id, shared)
    copies = [PeerCopyOut(node=n, holder=h, state=s) for n, h, s in peer_copies_of(session, checkpoint_id)]
    node_loss = NodeLossOut(safe=since is not None, since=since, peer_copies=copies)
    return CheckpointDetail.of(row, missing_while_waiting(session, row), node_loss)


def _shown(session: Session, checkpoint_id: int) -> CheckpointOut:
    """The checkpoint as it now is, with what it lacks while waiting."""
    row = queries.load_checkpoint(session, checkpoint_id)
    return CheckpointOut.of(row, missing_while_waiting(session, row))


def _out(db: Database, checkpoint_id: int) -> CheckpointOut:
    with db.read_session() as session:
        return _shown(session, checkpoint_id)


@router.post(
    "",
    operation_id="notifyCheckpoint",
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
    extra: dict[str, object] = {"world_size": body.world_size} if body.world_size is not None else {}
    if body.expected_files is not None:
        extra["expected_files"] = len(body.expected_files)
    files = tuple(body.expected_files) if body.expected_files is not None else None
    result = await notify_checkpoint(
        ctx,
        run=body.run,
        step=body.step,
        path=body.path,
        fmt=body.format,
        actor=f"api:{caller}",
        detail=extra,
        expect=Expectation(files=files, ranks=body.world_size, source="notify"),
    )
    if body.metrics:
        await blocking(_set_metrics, ctx.db, result.checkpoint_id, body.metrics, f"api:{caller}")
    response.status_code = result.status
    return await blocking(_out, ctx.db, result.checkpoint_id)


def _set_metrics(db: Database, checkpoint_id: int, metrics: dict[str, float], actor: str) -> None:
    with db.session() as session:
        protection.set_metrics(session, checkpoint_id, metrics, actor=actor)


# Pins, holds, metrics and deletion. Each answers the checkpoint as it now is.

CheckpointProblems = problem_responses(NotFound)


def _after(
    ctx: Context, session: Session, checkpoint_id: int, *, wake_retention: bool = False
) -> CheckpointOut:
    session.flush()
    if wake_retention and ctx.retention is not None:
        ctx.retention.wake()
    return _shown(session, checkpoint_id)


@router.put("/{checkpoint_id}/pin", operation_id="pinCheckpoint", responses=CheckpointProblems)
def pin(
    ctx: ContextDep,
    session: SessionDep,
    caller: Operator,
    checkpoint_id: CheckpointId,
    body: ReasonIn | None = None,
) -> CheckpointOut:
    """Pin ("golden"): kept on every tier, and copied again to every durable tier that dropped it."""
    durable = [t.name for t in ctx.config.tiers if t.durable]
    reason = body.reason if body else ""
    protection.pin(session, checkpoint_id, actor=f"api:{caller}", reason=reason, durable_tiers=durable)
    ctx.wake_pipeline()
    return _after(ctx, session, checkpoint_id)


@router.delete("/{checkpoint_id}/pin", operation_id="unpinCheckpoint", responses=CheckpointProblems)
def unpin(
    ctx: ContextDep,
    session: SessionDep,
    caller: Operator,
    checkpoint_id: CheckpointId,
    reason: ReasonQuery = "",
) -> CheckpointOut:
    """Give the checkpoint back to retention."""
    protection.unpin(session, checkpoint_id, actor=f"api:{caller}", reason=reason)
    return _after(ctx, session, checkpoint_id, wake_retention=True)


@router.post(
    "/{checkpoint_id}/holds",
    operation_id="addHold",
    status_code=201,
    responses=problem_responses(NotFound, Conflict),
)
def add_hold(
    ctx: ContextDep, session: SessionDep, caller: Admin, checkpoint_id: CheckpointId, body: HoldIn
) -> CheckpointOut:
    """Set a named legal hold (admin): no tier deletes the checkpoint while any hold is set."""
    protection.add_hold(session, checkpoint_id, name=body.name, reason=body.reason, actor=f"api:{caller}")
    return _after(ctx, session, checkpoint_id, wake_retention=True)  # sets the store's legal holds


@router.delete("/{checkpoint_id}/holds/{name}", operation_id="releaseHold", responses=CheckpointProblems)
def release_hold(
    ctx: ContextDep,
    session: SessionDep,
    caller: Admin,
    checkpoint_id: CheckpointId,
    name: HoldName,
    reason: ReasonQuery = "",
) -> CheckpointOut:
    """Release a legal hold (admin)."""
    protection.release_hold(session, checkpoint_id, name=name, actor=f"api:{caller}", reason=reason)
    return _after(ctx, session, checkpoint_id, wake_retention=True)


@router.put("/{checkpoint_id}/metrics", operation_id="setCheckpointMetrics", responses=CheckpointProblems)
def put_metrics(
    ctx: ContextDep, session: SessionDep, caller: Operator, checkpoint_id: CheckpointId, body: MetricsIn
) -> CheckpointOut:
    """Merge metrics into the checkpoint's (``keep_best`` reads them)."""
    protection.set_metrics(session, checkpoint_id, body.metrics, actor=f"api:{caller}")
    return _after(ctx, session, checkpoint_id, wake_retention=True)


@router.delete(
    "/{checkpoint_id}",
    operation_id="deleteCheckpoint",
    status_code=202,
    responses=problem_responses(NotFound, Conflict),
)
def delete_checkpoint(
    ctx: ContextDep,
    session: SessionDep,
    caller: Admin,
    checkpoint_id: CheckpointId,
    reason: Annotated[Reason, Query(min_length=1)],
) -> CheckpointOut:
    """Delete on every tier, each after its ``delete_delay`` (admin); 409 when pinned or held."""
    delays = {t.name: timedelta(seconds=t.delete_delay) for t in ctx.config.tiers}
    replica_deletions.schedule_checkpoint_deletion(
        session, checkpoint_id, delays=delays, now=utcnow(), actor=f"api:{caller}", reason=reason
    )
    return _after(ctx, session, checkpoint_id, wake_retention=True)


@router.post(
    "/{checkpoint_id}/undelete",
    operation_id="undeleteCheckpoint",
    responses=problem_responses(NotFound, Conflict),
)
def undelete(
    ctx: ContextDep,
    session: SessionDep,
    caller: Operator,
    checkpoint_id: CheckpointId,
    body: ReasonIn | None = None,
) -> CheckpointOut:
    """Cancel every deletion not yet begun, and pin the checkpoint (unpin gives it back to retention)."""
    reason = body.reason if body else ""
    replica_deletions.undelete(session, checkpoint_id, actor=f"api:{caller}", reason=reason)
    return _after(ctx, session, checkpoint_id)
