"""Runs as a training job sees them: their newest complete step, overall and per tier.

``run_summaries`` answers ``GET /v1/runs``; ``latest_checkpoint`` answers
``GET /v1/runs/{run}/latest``, the question a job asks at start-up to resume. "Complete" is
the checkpoint's state; "verified on a tier" is its replica's state there. Three grouped
queries in all, whatever the number of runs, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from tierd.daemon.catalog.models import Checkpoint, CheckpointState, Replica, ReplicaState, Run
from tierd.errors import NotFound

__all__ = ["RunSummary", "latest_checkpoint", "run_summaries"]

COMPLETE = CheckpointState.COMPLETE.value
VERIFIED = ReplicaState.VERIFIED.value


@dataclass
class RunSummary:
    """One run: its checkpoints, its newest complete step, and the newest verified per tier."""

    run: str
    checkpoints: int
    newest_step: int | None
    newest_checkpoint_id: int | None
    newest_verified_step: dict[str, int] = field(default_factory=dict)


def run_summaries(session: Session) -> list[RunSummary]:
    """Every run by name, with its newest complete step and, per tier, its newest verified one."""
    counts = session.execute(
        select(Run.id, Run.name, func.count(Checkpoint.id))
        .outerjoin(Checkpoint, Checkpoint.run_id == Run.id)
        .group_by(Run.id, Run.name)
        .order_by(Run.name)
    ).all()
    summaries = {run_id: RunSummary(name, count, None, None) for run_id, name, count in counts}
    newest = (
        select(Checkpoint.run_id, func.max(Checkpoint.step).label("step"))
        .where(Checkpoint.state == COMPLETE)
        .group_by(Checkpoint.run_id)
        .subquery()
    )
    on_newest = and_(Checkpoint.run_id == newest.c.run_id, Checkpoint.step == newest.c.step)
    for run_id, checkpoint_id, step in session.execute(
        select(Checkpoint.run_id, Checkpoint.id, Checkpoint.step).join(newest, on_newest)
    ):
        summaries[run_id].newest_step, summaries[run_id].newest_checkpoint_id = step, checkpoint_id
    per_tier = session.execute(
        select(Checkpoint.run_id, Replica.tier, func.max(Checkpoint.step))
        .join(Replica, Replica.checkpoint_id == Checkpoint.id)
        .where(Checkpoint.state == COMPLETE, Replica.state == VERIFIED)
        .group_by(Checkpoint.run_id, Replica.tier)
    )
    for run_id, tier, step in per_tier:
        summaries[run_id].newest_verified_step[tier] = step
    return list(summaries.values())


def latest_checkpoint(session: Session, run: str, *, tiers: Collection[str] | None = None) -> int:
    """The id of the run's newest complete step, verified on one of ``tiers`` when given.

    Raises NotFound when the run is unknown or has no such step.
    """
    run_id = session.scalar(select(Run.id).where(Run.name == run))
    if run_id is None:
        raise NotFound(f"no run named {run!r}")
    query = select(Checkpoint.id).where(Checkpoint.run_id == run_id, Checkpoint.state == COMPLETE)
    if tiers is not None:
        verified = select(Replica.id).where(
            Replica.checkpoint_id == Checkpoint.id, Replica.tier.in_(tiers), Replica.state == VERIFIED
        )
        query = query.where(verified.exists())
    checkpoint_id = session.scalar(query.order_by(Checkpoint.step.desc()).limit(1))
    if checkpoint_id is None:
        where = "" if tiers is None else f" verified on {', '.join(sorted(tiers)) or 'a durable tier'}"
        raise NotFound(f"run {run!r} has no complete step{where}")
    return checkpoint_id
