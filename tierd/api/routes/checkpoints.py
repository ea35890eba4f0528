"""Checkpoints: list and inspect."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from tierd.api.deps import ReadSessionDep, require_role
from tierd.api.schemas import CheckpointDetail, CheckpointOut, CheckpointPage
from tierd.daemon.catalog import checkpoints as queries

router = APIRouter(prefix="/v1/checkpoints", tags=["checkpoints"])
Reader = Annotated[str, Depends(require_role("read"))]


@router.get("")
def list_checkpoints(
    session: ReadSessionDep,
    _caller: Reader,
    run: Annotated[str | None, Query(max_length=255)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
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


@router.get("/{checkpoint_id}")
def get_checkpoint(session: ReadSessionDep, _caller: Reader, checkpoint_id: int) -> CheckpointDetail:
    """One checkpoint with its replicas and its files' checksums."""
    return CheckpointDetail.of(queries.get_checkpoint(session, checkpoint_id))
