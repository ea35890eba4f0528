"""Notify: a training job announces a checkpoint step so tierd records it without waiting."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Response
from pydantic import BaseModel, Field

from tierd.api.deps import ContextDep, require_role
from tierd.api.problems import PROBLEM_JSON
from tierd.api.schemas import CheckpointOut
from tierd.config import Format
from tierd.daemon.aio import blocking
from tierd.daemon.catalog.db import Database
from tierd.daemon.detect.notify import notify_checkpoint
from tierd.daemon.detect.record import load_checkpoint
from tierd.errors import NotifyRejected

__all__ = ["NotifyIn", "router"]

router = APIRouter(prefix="/v1/checkpoints", tags=["checkpoints"])
Operator = Annotated[str, Depends(require_role("operate"))]

_PROBLEM: dict[str, Any] = {"content": {PROBLEM_JSON: {}}}


class NotifyIn(BaseModel):
    """A checkpoint step the job has finished writing."""

    run: str = Field(min_length=1, max_length=255)
    step: int = Field(ge=0)
    path: str = Field(min_length=1, max_length=4096, description="absolute inside tier 0, or relative to it")
    format: Format | None = None


def _out(db: Database, checkpoint_id: int) -> CheckpointOut:
    with db.read_session() as session:
        return CheckpointOut.of(load_checkpoint(session, checkpoint_id))


@router.post(
    "",
    status_code=201,
    responses={
        200: {"description": "already recorded", "model": CheckpointOut},
        202: {"description": "recorded as waiting: the detector does not agree yet", "model": CheckpointOut},
        422: {"description": "path outside tier 0, missing, or a malformed body", **_PROBLEM},
    },
)
async def notify(body: NotifyIn, ctx: ContextDep, caller: Operator, response: Response) -> CheckpointOut:
    """Record a step now (201), return it if already recorded (200), or record it waiting (202)."""
    try:
        result = await notify_checkpoint(
            ctx, run=body.run, step=body.step, path=body.path, fmt=body.format, actor=f"api:{caller}"
        )
    except NotifyRejected as exc:
        raise HTTPException(422, str(exc)) from None
    response.status_code = result.status
    return await blocking(_out, ctx.db, result.checkpoint_id)
