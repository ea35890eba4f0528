"""What the usage report (``GET /v1/usage``) reads: aggregates only, never a row per checkpoint.

Each function is one aggregate query whose result has a row per tier, per run or per (tier,
run) of the runs that saved in the cadence window, so its size is bounded by the config and by
the runs active in the window, not by the catalog. ``ix_replicas_tier_state`` serves the bytes
stored, ``ix_checkpoints_created`` the cadence, ``ix_audit_events_action_at`` the deletions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Select, and_, case, func, not_, select
from sqlalchemy.orm import Session

from tierd.daemon.catalog.models import (
    AuditEvent,
    Checkpoint,
    CheckpointState,
    Replica,
    ReplicaState,
    Run,
)

__all__ = [
    "Cadence",
    "Stored",
    "cadence",
    "retention_deleted",
    "run_count",
    "stored_by_tier",
    "stored_by_tier_and_run",
    "top_runs",
]

_VERIFIED = ReplicaState.VERIFIED.value
#: The audit action of a finished deletion (retention's or the API's; eviction says ``evicted``).
_DELETED = "deleted"


@dataclass(frozen=True)
class Stored:
    """What one tier (or one run on one tier) holds verified: checkpoints, files, bytes."""

    checkpoints: int
    files: int
    bytes: int


@dataclass(frozen=True)
class Cadence:
    """One run's saves: those created since the window began, and when its first ever was.

    ``steps`` counts steps seen since (complete, changed or deleted since; not waiting ones),
    ``first_step``/``last_step`` their step numbers.
    """

    run: str
    steps: int
    bytes: int
    files: int
    first_step: int
    last_step: int
    first_saved_at: datetime


def _stored(count: int, files: int | None, size: int | None) -> Stored:
    return Stored(int(count), int(files or 0), int(size or 0))


def stored_by_tier(session: Session) -> dict[str, Stored]:
    """Per tier, what its verified replicas hold."""
    rows = session.execute(
        select(Replica.tier, func.count(), func.sum(Checkpoint.file_count), func.sum(Checkpoint.total_bytes))
        .join(Checkpoint, Checkpoint.id == Replica.checkpoint_id)
        .where(Replica.state == _VERIFIED)
        .group_by(Replica.tier)
    ).all()
    return {str(tier): _stored(n, files, size) for tier, n, files, size in rows}


def run_count(session: Session) -> int:
    """How many runs hold a verified replica on some tier."""
    held = (
        select(Checkpoint.run_id)
        .join(Replica, Replica.checkpoint_id == Checkpoint.id)
        .where(Replica.state == _VERIFIED)
        .distinct()
        .subquery()
    )
    return int(session.scalar(select(func.count()).select_from(held)) or 0)


def top_runs(session: Session, limit: int) -> dict[str, dict[str, int]]:
    """The ``limit`` runs holding the most bytes over every tier: run -> tier -> bytes.

    Biggest first (the dict keeps that order), ties by name.
    """
    total = func.sum(Checkpoint.total_bytes)
    biggest = session.execute(
        select(Run.id, Run.name)
        .join(Checkpoint, Checkpoint.run_id == Run.id)
        .join(Replica, Replica.checkpoint_id == Checkpoint.id)
        .where(Replica.state == _VERIFIED)
        .group_by(Run.id, Run.name)
        .order_by(total.desc(), Run.name)
        .limit(limit)
    ).all()
    runs: dict[str, dict[str, int]] = {name: {} for _id, name in biggest}
    if not runs:
        return runs
    rows = session.execute(
        select(Run.name, Replica.tier, total)
        .join(Checkpoint, Checkpoint.run_id == Run.id)
        .join(Replica, Replica.checkpoint_id == Checkpoint.id)
        .where(Replica.state == _VERIFIED, Run.id.in_([run_id for run_id, _name in biggest]))
        .group_by(Run.name, Replica.tier)
    ).all()
    for name, tier, size in rows:
        runs[name][tier] = int(size or 0)
    return runs


def _active_runs(since: datetime) -> Select[int]:
    return select(Checkpoint.run_id).where(Checkpoint.created_at >= since)


def cadence(session: Session, since: datetime) -> list[Cadence]:
    """Every run that saved a step since ``since``: its saves since then, and its first save ever."""
    recent = Checkpoint.created_at >= since
    seen = and_(recent, Checkpoint.state != CheckpointState.WAITING.value)
    rows = session.execute(
        select(
            Run.name,
            func.sum(case((seen, 1), else_=0)),
            func.sum(case((seen, Checkpoint.total_bytes), else_=0)),
            func.sum(case((seen, Checkpoint.file_count), else_=0)),
            func.min(case((seen, Checkpoint.step))),
            func.max(case((seen, Checkpoint.step))),
            func.min(Checkpoint.created_at),
        )
        .join(Run, Run.id == Checkpoint.run_id)
        .where(Checkpoint.run_id.in_(_active_runs(since)))
        .group_by(Run.name)
    ).all()
    return [
        Cadence(name, int(n or 0), int(size or 0), int(files or 0), int(lo or 0), int(hi or 0), first)
        for name, n, size, files, lo, hi, first in rows
        if n
    ]


def stored_by_tier_and_run(session: Session, since: datetime) -> dict[tuple[str, str], Stored]:
    """(tier, run) -> what is verified there, for the runs that saved a step since ``since``."""
    rows = session.execute(
        select(
            Replica.tier,
            Run.name,
            func.count(),
            func.sum(Checkpoint.file_count),
            func.sum(Checkpoint.total_bytes),
        )
        .join(Checkpoint, Checkpoint.id == Replica.checkpoint_id)
        .join(Run, Run.id == Checkpoint.run_id)
        .where(Replica.state == _VERIFIED, Checkpoint.run_id.in_(_active_runs(since)))
        .group_by(Replica.tier, Run.name)
    ).all()
    return {(tier, run): _stored(n, files, size) for tier, run, n, files, size in rows}


def retention_deleted(session: Session, since: datetime) -> dict[str, Stored]:
    """Per tier, the replicas retention finished deleting since ``since`` (from the audit log).

    An operator's deletion (``api:`` reason) and eviction (action ``evicted``) are not
    retention's; a step deleted from a tier twice (recorded again) counts twice.
    """
    rows = session.execute(
        select(
            AuditEvent.tier,
            func.count(),
            func.sum(Checkpoint.file_count),
            func.sum(Checkpoint.total_bytes),
        )
        .join(Checkpoint, Checkpoint.id == AuditEvent.checkpoint_id)
        .where(AuditEvent.action == _DELETED, AuditEvent.at >= since, AuditEvent.tier.is_not(None))
        .where(not_(AuditEvent.reason.startswith("api:")))
        .group_by(AuditEvent.tier)
    ).all()
    return {str(tier): _stored(n, files, size) for tier, n, files, size in rows}
