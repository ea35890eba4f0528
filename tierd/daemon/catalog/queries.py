"""Read queries over the catalog, shared by the API and the CLI."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from tierd.daemon.catalog.models import Checkpoint, Run
from tierd.errors import NotFound

__all__ = ["get_checkpoint", "list_checkpoints"]


def list_checkpoints(
    session: Session, *, run: str | None = None, limit: int = 50, offset: int = 0
) -> tuple[list[Checkpoint], int]:
    """Checkpoints newest first (by creation time, then id), with replicas loaded; and the total."""
    query = select(Checkpoint).join(Checkpoint.run)
    if run is not None:
        query = query.where(Run.name == run)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(
        query.options(selectinload(Checkpoint.replicas), selectinload(Checkpoint.run))
        .order_by(Checkpoint.created_at.desc(), Checkpoint.id.desc())
        .limit(limit)
        .offset(offset)
    ).all()
    return list(rows), total


def get_checkpoint(session: Session, checkpoint_id: int) -> Checkpoint:
    """One checkpoint with its run, replicas and files; raises NotFound."""
    row = session.scalars(
        select(Checkpoint)
        .where(Checkpoint.id == checkpoint_id)
        .options(
            selectinload(Checkpoint.replicas),
            selectinload(Checkpoint.files),
            selectinload(Checkpoint.run),
        )
    ).one_or_none()
    if row is None:
        raise NotFound(f"checkpoint {checkpoint_id} does not exist")
    return row
