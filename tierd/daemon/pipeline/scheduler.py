"""Which hop each checkpoint needs next, derived from replica states alone.

A pass reads the catalog and adds a queued copy job for every hop that is ready and
has no job yet. Because the work is derived from replica states (not from events), a
restart or a missed wake-up loses nothing: the next pass finds the same hops.

Rules, for tiers 0..n-1 in config order:
- tier ``d`` needs a copy when its replica is pending, failed or copying (or missing);
- its source is the nearest earlier tier holding a verified replica, provided every
  tier in between is gone (deleted or being deleted); so hop k→k+1 waits until tier k
  is verified, and falls back to an earlier tier only when tier k's copy was removed;
- when every earlier copy is gone (or is a failed tier 0, which nothing copies again), the
  nearest LATER tier holding a verified replica is the source: a replica that rotted on
  tier 1 after retention deleted tier 0's copy is repaired from tier 2.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from tierd.daemon.catalog.checkpoints import checkpoint_path
from tierd.daemon.catalog.db import Database, Session
from tierd.daemon.catalog.dialect import notify_jobs
from tierd.daemon.catalog.jobs import enqueue_copy_job
from tierd.daemon.catalog.models import ReplicaState
from tierd.daemon.catalog.part_replicas import settle_parts
from tierd.daemon.catalog.parts import nodes_of_parts
from tierd.daemon.catalog.replicas import GONE, NEEDS_COPY, add_pending_replica
from tierd.daemon.catalog.scheduling import CheckpointReplicas, checkpoints_to_replicate, lock_scheduling
from tierd.logs import get_logger

__all__ = [
    "GONE",
    "NEEDS_COPY",
    "Hop",
    "choose_source",
    "next_hops",
    "part_hops",
    "priority_of",
    "schedule_pass",
]

#: The audit actor of what a scheduler pass records.
ACTOR = "pipeline"

log = get_logger(__name__)


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
        if states[src] not in GONE and not (src == 0 and states[src] == ReplicaState.FAILED.value):
            return None  # the previous tier is still on its way: wait for it
    # Nothing earlier will ever be verified again: repair from a later tier's good copy.
    for src in range(dst + 1, len(states)):
        if states[src] == ReplicaState.VERIFIED.value:
            return src
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
    """Rows a pass would add: copy jobs (checkpoint, src, dst, priority, part) and missing replicas."""

    hops: list[tuple[int, str, str, int, int | None]] = field(default_factory=list)
    missing: list[tuple[int, str, int]] = field(default_factory=list)
    #: (checkpoint, tier) whose parts are all verified there, the step's replica not yet.
    settle: list[tuple[int, str]] = field(default_factory=list)

    @property
    def writes(self) -> bool:
        """Whether the pass has rows to add (under the scheduling lock)."""
        return bool(self.hops or self.missing)


def schedule_pass(
    db: Database,
    tiers: Sequence[str],
    *,
    fill_missing: bool = False,
    node_local: Collection[str] = (),
    only: Collection[int] | None = None,
    locate: Callable[[str, str], str] | None = None,
) -> int:
    """Add a queued copy job for every ready hop that has none; returns how many were added.

    A hop out of a ``node_local`` tier of a step spanning nodes is one job per part (each
    node copies what it holds); any other hop is one job for every file. ``only`` limits
    the pass to those checkpoints (None: every one). Planning reads only, so an idle pass
    takes no write lock. With ``fill_missing`` (at start-up: the tier list only changes with
    the config) replica rows missing for a configured tier are created as pending. A pass
    that queued jobs tells the other daemons sharing the catalog (``notify_jobs``). With
    ``locate`` (tier, path -> location), a step whose parts are all verified on a tier though
    its replica there is not (the last part's daemon died before it looked) is verified.
    Raises CatalogError when the catalog fails.
    """
    local = frozenset(node_local)
    with db.read_session() as session:
        found = checkpoints_to_replicate(session, tiers, include_missing=fill_missing, only=only)
        plan = _plan(found, tiers, local)
    if not plan.writes:  # nothing to queue: no scheduling lock (parts finishing at once all look)
        if locate is not None:
            _settle(db, plan.settle, locate)
        return 0
    with db.session() as session:
        lock_scheduling(session)
        found = checkpoints_to_replicate(session, tiers, include_missing=fill_missing, only=only)
        plan = _plan(found, tiers, local)  # again, under the lock
        for checkpoint_id, tier, index in plan.missing:
            add_pending_replica(session, checkpoint_id, tier, index)
        for checkpoint_id, src, dst, priority, part_id in plan.hops:
            enqueue_copy_job(session, checkpoint_id, src, dst, priority, part_id=part_id)
        if plan.hops:
            notify_jobs(session, _claimers(session, plan))
    if locate is not None:
        _settle(db, plan.settle, locate)
    return len(plan.hops)


def _claimers(session: Session, plan: _Plan) -> set[str] | None:
    """The nodes that may claim the plan's jobs: the parts' own; None when any daemon may."""
    if any(part_id is None for *_, part_id in plan.hops):
        return None
    return nodes_of_parts(session, {part_id for *_, part_id in plan.hops if part_id is not None})


def _settle(db: Database, steps: Sequence[tuple[int, str]], locate: Callable[[str, str], str]) -> None:
    for checkpoint_id, tier in steps:
        path = checkpoint_path(db, checkpoint_id)
        if path is None:
            continue
        if settle_parts(db, checkpoint_id, tier, locate(tier, path), actor=ACTOR).settled:
            log.warning("replica_settled_late", checkpoint=checkpoint_id, tier=tier)


def _plan(checkpoints: Iterable[CheckpointReplicas], tiers: Sequence[str], local: frozenset[str]) -> _Plan:
    plan = _Plan()
    for ckpt in checkpoints:
        rows = ckpt.states
        plan.missing += [(ckpt.checkpoint_id, t, i) for i, t in enumerate(tiers) if i > 0 and t not in rows]
        states = [rows.get(name) for name in tiers]
        priority = priority_of(ckpt.created_at)
        for hop in next_hops(states):
            src, dst = tiers[hop.src], tiers[hop.dst]
            if dst in ckpt.covered:
                continue
            if src in local and len(ckpt.parts) > 1:  # one part: its node copies it whole, as ever
                plan.hops += [(ckpt.checkpoint_id, src, dst, priority, p) for p in part_hops(ckpt, src, dst)]
                if all(states.get(dst) == ReplicaState.VERIFIED.value for states in ckpt.parts.values()):
                    plan.settle.append((ckpt.checkpoint_id, dst))
            else:
                plan.hops.append((ckpt.checkpoint_id, src, dst, priority, None))
    return plan


def part_hops(ckpt: CheckpointReplicas, src: str, dst: str) -> list[int]:
    """The parts to copy from node-local ``src`` to ``dst`` now.

    Each part still to copy, verified on its node's ``src``, and with no open job; the part
    holding the format's marker only once every other part is verified on ``dst``, so the
    destination never shows the marker before the data.
    """
    verified = ReplicaState.VERIFIED.value
    todo = [
        part_id
        for part_id, states in sorted(ckpt.parts.items())
        if states.get(dst) != verified and states.get(src, verified) == verified
    ]
    others_done = all(
        states.get(dst) == verified for part_id, states in ckpt.parts.items() if part_id != ckpt.marker_part
    )
    return [
        part_id
        for part_id in todo
        if (dst, part_id) not in ckpt.part_covered and (part_id != ckpt.marker_part or others_done)
    ]
