"""The catalog's rows turned into what the pure planner takes (one read, no I/O after it)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property

from tierd.daemon.catalog import retention as catalog_retention
from tierd.daemon.catalog.db import Database, Session
from tierd.daemon.catalog.models import CheckpointState as StoredState
from tierd.daemon.catalog.peer_copies import safe_since
from tierd.daemon.catalog.retention import CheckpointRow
from tierd.daemon.retention.plan import Plan, plan_retention
from tierd.daemon.retention.policies import CheckpointFacts
from tierd.daemon.retention.state import (
    Block,
    CheckpointState,
    Release,
    ReplicaState,
    TierRules,
    protections,
)

__all__ = ["Snapshot", "take_snapshot"]

#: How many steps on a releasing tier 0 a plan reads the safety of (``_with_safety``).
RELEASE_LOOK = 256
#: The stored values' states, looked up without the enum's (slower) call.
_REPLICA_STATES = {state.value: state for state in ReplicaState}


@dataclass(frozen=True)
class Snapshot:
    """Every live checkpoint as the planner sees it, and the plan made from them."""

    checkpoints: tuple[CheckpointState, ...]
    plan: Plan
    taken_at: datetime
    _index: dict[int, CheckpointState] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._index.update((c.id, c) for c in self.checkpoints)

    def by_id(self, checkpoint_id: int) -> CheckpointState | None:
        """One checkpoint, or None when it is gone."""
        return self._index.get(checkpoint_id)

    @cached_property
    def protections(self) -> dict[int, tuple[Block, ...]]:
        """What protects each checkpoint on every tier (computed once)."""
        return protections(self.checkpoints)


def take_snapshot(
    db: Database,
    rules: Sequence[TierRules],
    now: datetime,
    *,
    node: str | None = None,
    node_local: Collection[str] = (),
) -> Snapshot:
    """Read the catalog once and plan over it (blocking: run it through ``aio.blocking``).

    With ``node`` (a fleet), the ``node_local`` tiers hold only that node's own checkpoints.
    """
    with db.read_session() as session:
        rows = catalog_retention.load_retention_rows(session, node=node, node_local=node_local)
        checkpoints = tuple(_state_of(row, node_local) for row in rows)
        releases = [rule.release for rule in rules if rule.release is not None and rule.release.peer]
        if releases:
            checkpoints = _with_safety(session, checkpoints, releases[0])
    return Snapshot(checkpoints, plan_retention(checkpoints, rules, now), now)


def _with_safety(
    session: Session, checkpoints: tuple[CheckpointState, ...], release: Release
) -> tuple[CheckpointState, ...]:
    """The checkpoints, with when each became safe against one node's loss where ``release`` asks.

    Only the steps on the releasing tier and verified on its next one are read (three
    statements each), the newest ``RELEASE_LOOK`` of them at most: a RAM tier 0 holds few
    steps, each until it is released; an older one waits until newer ones went.
    """
    candidates = [c.id for c in checkpoints if release.candidate(c)][-RELEASE_LOOK:]  # oldest first
    since = {cid: safe_since(session, cid, release.shared_tiers) for cid in candidates}
    return tuple(replace(c, safe_since=since[c.id]) if c.id in since else c for c in checkpoints)


def _state_of(row: CheckpointRow, node_local: Collection[str] = ()) -> CheckpointState:
    complete = row.state == StoredState.COMPLETE.value
    facts = CheckpointFacts(
        id=row.id,
        run=row.run,
        step=row.step,
        created_at=row.created_at,
        completed_at=(row.completed_at or row.created_at) if complete else None,
        metrics=row.metrics,
    )
    return CheckpointState(
        facts=facts,
        replicas={
            tier: _REPLICA_STATES.get(state) or ReplicaState(state) for tier, state in row.replicas.items()
        },
        size_bytes=row.total_bytes,
        pinned=row.pinned,
        holds=tuple(row.holds),
        in_use=row.in_use,
        local_size={} if row.local_bytes is None else dict.fromkeys(node_local, row.local_bytes),
    )


def _replica_state(stored: str) -> ReplicaState:
    """The state a stored value names; raises ValueError for one that names none."""
    return _REPLICA_STATES.get(stored) or ReplicaState(stored)
