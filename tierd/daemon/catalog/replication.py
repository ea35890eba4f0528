"""What the scheduler reads to plan copies, and the lock its writes take.

The checkpoints that may need a hop (complete, with a replica still to copy, or missing a
tier's row), read in batches of ``BATCH`` ids with their creation time, their replicas'
states and the hops that already have an open job: three queries a batch, whatever the
number of checkpoints in it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from tierd.daemon.catalog.checkpoints import creation_times
from tierd.daemon.catalog.dialect import advisory_xact_lock
from tierd.daemon.catalog.jobs import open_copy_hops
from tierd.daemon.catalog.models import Checkpoint, CheckpointState, Replica
from tierd.daemon.catalog.replicas import NEEDS_COPY

__all__ = ["ADVISORY_LOCK_KEY", "BATCH", "CheckpointReplicas", "checkpoints_to_replicate", "lock_scheduling"]

#: Serialises scheduler passes of daemons on different nodes sharing one PostgreSQL catalog.
ADVISORY_LOCK_KEY = 0x7469_6572_6431  # "tierd1"
BATCH = 500


@dataclass(frozen=True)
class CheckpointReplicas:
    """A checkpoint's replica states (tier -> state) and the tiers an open copy job already covers."""

    checkpoint_id: int
    created_at: datetime
    states: Mapping[str, str]
    covered: frozenset[str]


def lock_scheduling(session: Session) -> None:
    """Wait for other daemons' scheduling transactions on the shared catalog (PostgreSQL)."""
    advisory_xact_lock(session, ADVISORY_LOCK_KEY)


def checkpoints_to_replicate(
    session: Session, tiers: Sequence[str], *, include_missing: bool
) -> Iterator[CheckpointReplicas]:
    """Complete checkpoints with a replica still to copy (or, if asked, missing a tier's row).

    Read ``BATCH`` checkpoints at a time; consume it inside the session.
    """
    candidates = _candidates(session, tiers, include_missing)
    for start in range(0, len(candidates), BATCH):
        yield from _batch(session, candidates[start : start + BATCH])


def _candidates(session: Session, tiers: Sequence[str], include_missing: bool) -> list[int]:
    needs_copy: ColumnElement[bool] = Checkpoint.id.in_(
        select(Replica.checkpoint_id).where(Replica.state.in_(NEEDS_COPY), Replica.tier.in_(tiers[1:]))
    )
    if include_missing:
        known = (
            select(func.count())
            .select_from(Replica)
            .where(Replica.checkpoint_id == Checkpoint.id, Replica.tier.in_(tiers))
            .scalar_subquery()
        )
        needs_copy = needs_copy | (known < len(tiers))
    query = select(Checkpoint.id).where(Checkpoint.state == CheckpointState.COMPLETE.value, needs_copy)
    return list(session.scalars(query.order_by(Checkpoint.id)))


def _batch(session: Session, ids: Sequence[int]) -> Iterator[CheckpointReplicas]:
    created = creation_times(session, ids)
    states: dict[int, dict[str, str]] = {}
    for checkpoint_id, tier, state in session.execute(
        select(Replica.checkpoint_id, Replica.tier, Replica.state).where(Replica.checkpoint_id.in_(ids))
    ):
        states.setdefault(checkpoint_id, {})[tier] = state
    covered: dict[int, set[str]] = {}
    for checkpoint_id, dst in open_copy_hops(session, ids):
        covered.setdefault(checkpoint_id, set()).add(dst)
    for checkpoint_id, created_at in created:
        yield CheckpointReplicas(
            checkpoint_id,
            created_at,
            states.get(checkpoint_id, {}),
            frozenset(covered.get(checkpoint_id, ())),
        )
