"""Which hop each checkpoint needs next, derived from replica states alone.

A pass reads the catalog and adds a queued copy job for every hop that is ready and
has no job yet. Because the work is derived from replica states (not from events), a
restart or a missed wake-up loses nothing: the next pass finds the same hops.

Rules, for tiers 0..n-1 in config order:
- tier ``d`` needs a copy when its replica is pending, failed or copying (or missing);
- its source is the nearest earlier tier holding a verified replica, provided every
  tier in between is gone (deleted or being deleted); so hop k→k+1 waits until tier k
  is verified, and falls back to an earlier tier only when tier k's copy was removed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import ColumnElement, func, select, text
from sqlalchemy.orm import Session

from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import (
    Checkpoint,
    CheckpointState,
    Job,
    JobKind,
    Replica,
    ReplicaState,
)
from tierd.daemon.pipeline.jobs import OPEN_STATES, enqueue_copy

__all__ = ["Hop", "choose_source", "next_hops", "priority_of", "schedule_pass"]

NEEDS_COPY = frozenset({ReplicaState.PENDING.value, ReplicaState.FAILED.value, ReplicaState.COPYING.value})
GONE = frozenset({ReplicaState.DELETED.value, ReplicaState.DELETING.value})
#: Serialises scheduler passes of daemons on different nodes sharing one PostgreSQL catalog.
ADVISORY_LOCK_KEY = 0x7469_6572_6431  # "tierd1"
BATCH = 500


@dataclass(frozen=True)
class Hop:
    """Copy a checkpoint from tier index ``src`` to tier index ``dst``."""

    src: int
    dst: int


def choose_source(states: Sequence[str | None], dst: int) -> int | None:
    """The tier index to copy tier ``dst`` from, or None while no source is ready.

    ``states[i]`` is the replica state on tier i (None when there is no replica row).
    """
    for src in range(dst - 1, -1, -1):
        if states[src] == ReplicaState.VERIFIED.value:
            return src
        if states[src] not in GONE:
            return None  # the previous tier is still on its way: wait for it
    return None


def next_hops(states: Sequence[str | None]) -> list[Hop]:
    """Every hop this checkpoint can start now (at most one per destination tier)."""
    hops = []
    for dst in range(1, len(states)):
        state = states[dst]
        if state is not None and state not in NEEDS_COPY:
            continue
        src = choose_source(states, dst)
        if src is not None:
            hops.append(Hop(src, dst))
    return hops


def priority_of(created_at: datetime) -> int:
    """A job priority from the checkpoint's creation time: newer checkpoints go first."""
    return int(created_at.timestamp() * 1_000_000)


@dataclass
class _Plan:
    """Rows a pass would add: copy jobs (checkpoint, src, dst, priority) and missing replicas."""

    hops: list[tuple[int, str, str, int]] = field(default_factory=list)
    missing: list[tuple[int, str, int]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.hops or self.missing)


def schedule_pass(db: Database, tiers: Sequence[str], *, fill_missing: bool = False) -> int:
    """Add a queued copy job for every ready hop that has none; returns how many were added.

    Planning reads only, so an idle pass takes no write lock. With ``fill_missing``
    (at start-up: the tier list only changes with the config) replica rows missing for a
    configured tier are created as pending.
    """
    with db.read_session() as session:
        if not _plan(session, tiers, fill_missing):
            return 0
    with db.session() as session:
        if not db.is_sqlite:
            session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
        plan = _plan(session, tiers, fill_missing)  # again, under the lock
        for checkpoint_id, tier, index in plan.missing:
            state = ReplicaState.PENDING.value
            session.add(Replica(checkpoint_id=checkpoint_id, tier=tier, tier_index=index, state=state))
        for checkpoint_id, src, dst, priority in plan.hops:
            enqueue_copy(session, checkpoint_id, src, dst, priority)
        return len(plan.hops)


def _plan(session: Session, tiers: Sequence[str], fill_missing: bool) -> _Plan:
    plan = _Plan()
    candidates = _candidates(session, tiers, fill_missing)
    for start in range(0, len(candidates), BATCH):
        _plan_batch(session, candidates[start : start + BATCH], tiers, plan)
    return plan


def _candidates(session: Session, tiers: Sequence[str], fill_missing: bool) -> list[int]:
    """Complete checkpoints with a replica still to copy (or, if asked, missing a tier's row)."""
    needs_copy: ColumnElement[bool] = Checkpoint.id.in_(
        select(Replica.checkpoint_id).where(Replica.state.in_(NEEDS_COPY), Replica.tier.in_(tiers[1:]))
    )
    if fill_missing:
        known = (
            select(func.count())
            .select_from(Replica)
            .where(Replica.checkpoint_id == Checkpoint.id, Replica.tier.in_(tiers))
            .scalar_subquery()
        )
        needs_copy = needs_copy | (known < len(tiers))
    query = select(Checkpoint.id).where(Checkpoint.state == CheckpointState.COMPLETE.value, needs_copy)
    return list(session.scalars(query.order_by(Checkpoint.id)))


def _plan_batch(session: Session, ids: Sequence[int], tiers: Sequence[str], plan: _Plan) -> None:
    checkpoints = session.execute(select(Checkpoint.id, Checkpoint.created_at).where(Checkpoint.id.in_(ids)))
    replicas: dict[int, dict[str, str]] = {}
    for checkpoint_id, tier, state in session.execute(
        select(Replica.checkpoint_id, Replica.tier, Replica.state).where(Replica.checkpoint_id.in_(ids))
    ):
        replicas.setdefault(checkpoint_id, {})[tier] = state
    covered = {
        (checkpoint_id, dst)
        for checkpoint_id, dst in session.execute(
            select(Job.checkpoint_id, Job.dst_tier).where(
                Job.checkpoint_id.in_(ids), Job.kind == JobKind.COPY.value, Job.state.in_(OPEN_STATES)
            )
        )
    }
    for checkpoint_id, created_at in checkpoints:
        rows = replicas.get(checkpoint_id, {})
        plan.missing += [(checkpoint_id, t, i) for i, t in enumerate(tiers) if i > 0 and t not in rows]
        states = [rows.get(name) for name in tiers]
        for hop in next_hops(states):
            if (checkpoint_id, tiers[hop.dst]) not in covered:
                plan.hops.append((checkpoint_id, tiers[hop.src], tiers[hop.dst], priority_of(created_at)))
