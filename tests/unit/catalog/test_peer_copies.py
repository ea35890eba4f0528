"""Peer copies in the catalog, and when a step became safe against one node's loss (both catalogs)."""

from __future__ import annotations

from datetime import datetime

from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, Part, PartReplica, Replica, ReplicaState, Run
from tierd.daemon.catalog.peer_copies import (
    mark_peer_copy,
    newest_safe_created_at,
    peer_copies_of,
    safe_since,
)

SHARED = ("pfs",)


def _step(db: Database, nodes: tuple[str, ...], run_name: str = "demo") -> tuple[int, dict[str, int]]:
    with db.session() as s:
        run = Run(name=run_name)
        s.add(run)
        s.flush()
        checkpoint = Checkpoint(
            run_id=run.id,
            step=1,
            path=f"{run_name}/step_1",
            format="dcp",
            state="complete",
            node=nodes[0] if nodes else "a",
        )
        s.add(checkpoint)
        s.flush()
        parts = {n: Part(checkpoint_id=checkpoint.id, node=n) for n in nodes}
        s.add_all(parts.values())
        s.flush()
        return checkpoint.id, {n: p.id for n, p in parts.items()}


def _safe(db: Database, checkpoint_id: int) -> datetime | None:
    with db.read_session() as s:
        return safe_since(s, checkpoint_id, SHARED)


def test_a_step_is_safe_once_every_part_is_verified_on_another_node(db: Database) -> None:
    checkpoint_id, parts = _step(db, ("a", "b", "c"))
    assert _safe(db, checkpoint_id) is None
    with db.session() as s:
        mark_peer_copy(s, parts["a"], "b", ReplicaState.VERIFIED)
        mark_peer_copy(s, parts["b"], "c", ReplicaState.VERIFIED)
        mark_peer_copy(s, parts["c"], "a", ReplicaState.COPYING)
    assert _safe(db, checkpoint_id) is None  # c's copy is not verified yet
    with db.session() as s:
        mark_peer_copy(s, parts["c"], "a", ReplicaState.VERIFIED)
    since = _safe(db, checkpoint_id)
    assert isinstance(since, datetime)
    with db.read_session() as s:
        assert peer_copies_of(s, checkpoint_id) == [
            ("a", "b", "verified"),
            ("b", "c", "verified"),
            ("c", "a", "verified"),
        ]
    with db.session() as s:
        mark_peer_copy(s, parts["c"], "a", ReplicaState.FAILED, "peer a: 507")
    assert _safe(db, checkpoint_id) is None


def test_a_copy_on_the_writing_node_itself_is_no_safety(db: Database) -> None:
    checkpoint_id, parts = _step(db, ("a",))
    with db.session() as s:
        mark_peer_copy(s, parts["a"], "a", ReplicaState.VERIFIED)
    assert _safe(db, checkpoint_id) is None


def test_a_part_verified_on_a_shared_tier_or_the_whole_step_counts(db: Database) -> None:
    checkpoint_id, parts = _step(db, ("a", "b"))
    with db.session() as s:
        mark_peer_copy(s, parts["a"], "b", ReplicaState.VERIFIED)
        s.add(
            PartReplica(
                part_id=parts["b"], tier="pfs", state="verified", verified_at=datetime.now().astimezone()
            )
        )
        s.add(PartReplica(part_id=parts["a"], tier="nvme", state="verified"))
    assert _safe(db, checkpoint_id) is not None
    other, _ = _step(db, (), "other")
    with db.session() as s:
        s.add(
            Replica(
                checkpoint_id=other,
                tier="pfs",
                tier_index=1,
                state="verified",
                verified_at=datetime.now().astimezone(),
            )
        )
    assert _safe(db, other) is not None


def test_the_newest_safe_step_is_the_recovery_point_for_one_node_lost(db: Database) -> None:
    older, older_parts = _step(db, ("a", "b"), "older")
    newer, newer_parts = _step(db, ("a", "b"), "newer")
    with db.read_session() as s:
        assert newest_safe_created_at(s, SHARED) is None
    with db.session() as s:
        mark_peer_copy(s, older_parts["a"], "b", ReplicaState.VERIFIED)
        mark_peer_copy(s, older_parts["b"], "a", ReplicaState.VERIFIED)
        mark_peer_copy(s, newer_parts["a"], "b", ReplicaState.VERIFIED)
    with db.read_session() as s:
        created = {c.id: c.created_at for c in s.query(Checkpoint)}
        assert newest_safe_created_at(s, SHARED) == created[older]
    with db.session() as s:
        mark_peer_copy(s, newer_parts["b"], "a", ReplicaState.VERIFIED)
    with db.read_session() as s:
        assert newest_safe_created_at(s, SHARED) == created[newer]
