"""Catalog rows for pipeline unit tests (through ``tests.fixtures.world.record``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from tests.fixtures.world import FileRow, ReplicaRow, record
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Job, Replica, ReplicaState

TIERS = ("nvme", "pfs", "s3", "dr")
BASE = datetime(2026, 1, 1, tzinfo=UTC)


def add_checkpoint(
    db: Database,
    step: int,
    states: tuple[str | None, ...] = ("verified", "pending", "pending", "pending"),
    *,
    run: str = "demo",
    node: str = "",
    state: str = "complete",
    minutes: int | None = None,
) -> int:
    """A checkpoint created ``minutes`` (default: ``step``) after BASE with replicas in ``states``."""
    created = BASE + timedelta(minutes=step if minutes is None else minutes)
    return record(
        db,
        run=run,
        step=step,
        path=f"{run}/step{step}",
        files=[FileRow(f"{run}/step{step}/a", 3, "x")],
        replicas=[
            ReplicaRow(tier, index, replica_state, created if replica_state == "verified" else None)
            for index, (tier, replica_state) in enumerate(zip(TIERS, states, strict=True))
            if replica_state is not None
        ],
        state=state,
        node=node,
        created_at=created,
    )


def jobs(db: Database) -> list[Job]:
    with db.read_session() as s:
        return list(s.scalars(select(Job).order_by(Job.id)))


def replica(db: Database, checkpoint_id: int, tier: str) -> Replica:
    with db.read_session() as s:
        return s.scalars(
            select(Replica).where(Replica.checkpoint_id == checkpoint_id, Replica.tier == tier)
        ).one()


def set_replica(db: Database, checkpoint_id: int, tier: str, state: ReplicaState) -> None:
    with db.session() as s:
        row = s.scalars(
            select(Replica).where(Replica.checkpoint_id == checkpoint_id, Replica.tier == tier)
        ).one()
        row.state = state.value
