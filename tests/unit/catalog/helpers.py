"""Catalog rows for pipeline unit tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, File, Job, Replica, ReplicaState, Run

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
    with db.session() as s:
        run_row = s.scalars(select(Run).where(Run.name == run)).one_or_none() or Run(name=run)
        ckpt = Checkpoint(
            run=run_row,
            step=step,
            path=f"{run}/step{step}",
            format="dcp",
            state=state,
            node=node,
            created_at=BASE + timedelta(minutes=step if minutes is None else minutes),
            total_bytes=3,
            file_count=1,
        )
        ckpt.files.append(
            File(relpath=f"{run}/step{step}/a", size=3, checksum_algo="crc64nvme", checksum="x")
        )
        for index, (tier, replica_state) in enumerate(zip(TIERS, states, strict=True)):
            if replica_state is not None:
                verified_at = ckpt.created_at if replica_state == "verified" else None
                ckpt.replicas.append(
                    Replica(tier=tier, tier_index=index, state=replica_state, verified_at=verified_at)
                )
        s.add(ckpt)
        s.flush()
        return ckpt.id


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
