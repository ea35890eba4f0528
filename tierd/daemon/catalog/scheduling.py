"""What the scheduler reads to plan copies, and the lock its writes take.

The checkpoints that may need a hop (complete or changed, with a replica still to copy, or
missing a tier's row), read in batches of ``BATCH`` ids with their creation time, their replicas'
states and the hops that already have an open job: three queries a batch, whatever the
number of checkpoints in it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from tierd.daemon.catalog.checkpoints import creation_times
from tierd.daemon.catalog.dialect import advisory_xact_lock
from tierd.daemon.catalog.jobs import open_copy_hops, open_part_hops
from tierd.daemon.catalog.models import Checkpoint, CheckpointState, File, Part, PartReplica, Replica
from tierd.daemon.catalog.replicas import NEEDS_COPY

__all__ = [
    "ADVISORY_LOCK_KEY",
    "BATCH",
    "CheckpointReplicas",
    "checkpoints_to_replicate",
    "lock_scheduling",
    "newest_file_parts",
]

#: Serialises scheduler passes of daemons on different nodes sharing one PostgreSQL catalog.
ADVISORY_LOCK_KEY = 0x7469_6572_6431  # "tierd1"
BATCH = 500


@dataclass(frozen=True)
class CheckpointReplicas:
    """A checkpoint's replica states (tier -> state) and the tiers an open copy job already covers.

    ``parts``: each part's states (part id -> tier -> state); ``part_covered``: the (tier,
    part) an open one-part job covers; ``marker_part``: with several parts, the one holding
    the newest file (the format's marker, written last), which is copied last.
    """

    checkpoint_id: int
    created_at: datetime
    states: Mapping[str, str]
    covered: frozenset[str]
    parts: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    part_covered: frozenset[tuple[str, int]] = frozenset()
    marker_part: int | None = None


def lock_scheduling(session: Session) -> None:
    """Wait for other daemons' scheduling transactions on the shared catalog (PostgreSQL)."""
    advisory_xact_lock(session, ADVISORY_LOCK_KEY)


def checkpoints_to_replicate(
    session: Session, tiers: Sequence[str], *, include_missing: bool, only: Collection[int] | None = None
) -> Iterator[CheckpointReplicas]:
    """Complete (or changed) checkpoints with a replica still to copy (or, if asked, missing a tier's row).

    ``only``: of these checkpoints (None: of all). Read ``BATCH`` checkpoints at a time;
    consume it inside the session.
    """
    candidates = _candidates(session, tiers, include_missing, only)
    for start in range(0, len(candidates), BATCH):
        yield from _batch(session, candidates[start : start + BATCH])


def _candidates(
    session: Session, tiers: Sequence[str], include_missing: bool, only: Collection[int] | None
) -> list[int]:
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
    # A changed checkpoint's tier 0 failed; its verified copies on later tiers still move on.
    movable = Checkpoint.state.in_([CheckpointState.COMPLETE.value, CheckpointState.CHANGED.value])
    query = select(Checkpoint.id).where(movable, needs_copy)
    if only is not None:
        query = query.where(Checkpoint.id.in_(sorted(only)))
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
    part_covered: dict[int, set[tuple[str, int]]] = {}
    for checkpoint_id, dst, part_id in open_part_hops(session, ids):
        part_covered.setdefault(checkpoint_id, set()).add((dst, part_id))
    parts = _part_states(session, ids)
    markers = newest_file_parts(session, [cid for cid, mine in parts.items() if len(mine) > 1])
    for checkpoint_id, created_at in created:
        mine = parts.get(checkpoint_id, {})
        yield CheckpointReplicas(
            checkpoint_id,
            created_at,
            states.get(checkpoint_id, {}),
            frozenset(covered.get(checkpoint_id, ())),
            mine,
            frozenset(part_covered.get(checkpoint_id, ())),
            markers.get(checkpoint_id),
        )


def _part_states(session: Session, ids: Sequence[int]) -> dict[int, dict[int, dict[str, str]]]:
    """The states of every part of the checkpoints ``ids``: by checkpoint, part, then tier."""
    found: dict[int, dict[int, dict[str, str]]] = {}
    for part_id, checkpoint_id in session.execute(
        select(Part.id, Part.checkpoint_id).where(Part.checkpoint_id.in_(ids))
    ):
        found.setdefault(checkpoint_id, {})[part_id] = {}
    rows = session.execute(
        select(Part.checkpoint_id, PartReplica.part_id, PartReplica.tier, PartReplica.state)
        .join(Part, Part.id == PartReplica.part_id)
        .where(Part.checkpoint_id.in_(ids))
    )
    for checkpoint_id, part_id, tier, state in rows:
        found[checkpoint_id][part_id][tier] = state
    return found


def newest_file_parts(session: Session, ids: Sequence[int]) -> dict[int, int | None]:
    """The part holding each checkpoint's most recently written file, for the checkpoints ``ids``.

    One query for them all (a window over each checkpoint's files).
    """
    if not ids:
        return {}
    order = (File.mtime_ns.desc(), File.relpath.desc())
    ranked = (
        select(
            File.checkpoint_id,
            File.part_id,
            func.row_number().over(partition_by=File.checkpoint_id, order_by=order).label("rank"),
        )
        .where(File.checkpoint_id.in_(ids))
        .subquery()
    )
    rows = session.execute(select(ranked.c.checkpoint_id, ranked.c.part_id).where(ranked.c.rank == 1))
    return {checkpoint_id: part_id for checkpoint_id, part_id in rows}
