"""Peer copies in the catalog, and when a step became safe against one node's loss (both catalogs)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import update
from sqlalchemy.orm import Session

from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, Part, PartReplica, Replica, ReplicaState, Run
from tierd.daemon.catalog.peer_copies import (
    copies_to_drop,
    interrupt_copies,
    mark_peer_copy,
    newest_safe_created_at,
    parts_to_send,
    peer_copies_of,
    safe_since,
    write_off_copies,
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


def _steps(db: Database, steps: int) -> dict[int, dict[str, int]]:
    """Steps 1..``steps`` of one run, each with parts on nodes a and b: part ids by step, then node."""
    found: dict[int, dict[str, int]] = {}
    with db.session() as s:
        run = Run(name="sent")
        s.add(run)
        s.flush()
        for step in range(1, steps + 1):
            row = Checkpoint(
                run_id=run.id, step=step, path=f"sent/{step}", format="dcp", state="complete", node="a"
            )
            s.add(row)
            s.flush()
            parts = {n: Part(checkpoint_id=row.id, node=n) for n in ("a", "b")}
            s.add_all(parts.values())
            s.flush()
            found[step] = {n: p.id for n, p in parts.items()}
    return found


def _to_send(
    db: Database, replicas: int = 1, keep_last: int | None = None
) -> list[tuple[int, tuple[str, ...]]]:
    with db.read_session() as s:
        return [(p.step, p.holders) for p in parts_to_send(s, "a", replicas, SHARED, keep_last)]


def test_the_sender_is_told_its_parts_lacking_copies_newest_first(db: Database) -> None:
    parts = _steps(db, 4)
    assert _to_send(db) == [(4, ()), (3, ()), (2, ()), (1, ())]
    assert _to_send(db, keep_last=2) == [(4, ()), (3, ())]  # the peer tier's retention drops the rest
    with db.session() as s:
        mark_peer_copy(s, parts[4]["a"], "b", ReplicaState.VERIFIED)  # enough for one replica
        mark_peer_copy(s, parts[3]["a"], "c", ReplicaState.VERIFIED)
        mark_peer_copy(s, parts[3]["a"], "a", ReplicaState.VERIFIED)  # itself: counts for nothing
        mark_peer_copy(s, parts[2]["a"], "b", ReplicaState.VERIFIED)
        s.add(PartReplica(part_id=parts[1]["a"], tier="pfs", state="verified"))  # a shared tier has it
    assert _to_send(db) == []
    assert _to_send(db, replicas=2) == [(4, ("b",)), (3, ("c",)), (2, ("b",))]
    with db.session() as s:
        mark_peer_copy(s, parts[4]["a"], "d", ReplicaState.DELETED, "evicted: disk pressure")
    with db.read_session() as s:
        (newest, *_) = parts_to_send(s, "a", 2, SHARED, None)
    assert (newest.step, newest.holders, newest.passed) == (4, ("b",), ("d",))  # d is tried last


def test_a_step_whose_deletion_is_scheduled_is_offered_no_more(db: Database) -> None:
    """Its files go: a send found them gone ("not found") and was retried until it was ``deleted``."""
    parts = _steps(db, 3)
    with db.session() as s:
        step_of = {s.get_one(Part, parts[step]["a"]).checkpoint_id: step for step in parts}
        for checkpoint_id in step_of:
            for tier in ("ram", "nvme"):  # two node-local tiers
                s.add(Replica(checkpoint_id=checkpoint_id, tier=tier, tier_index=0, state="verified"))
    assert _to_send(db) == [(3, ()), (2, ()), (1, ())]
    ids = {step: checkpoint_id for checkpoint_id, step in step_of.items()}
    with db.session() as s:  # step 3: scheduled on every tier (the API's DELETE)
        s.execute(update(Replica).where(Replica.checkpoint_id == ids[3]).values(state="deleting"))
        # step 2: released from RAM only, the NVMe tier keeps it (the copies are read from there)
        s.execute(
            update(Replica)
            .where(Replica.checkpoint_id == ids[2], Replica.tier == "ram")
            .values(state="deleting")
        )
    assert _to_send(db) == [(2, ()), (1, ())]


def test_copies_cut_by_a_restart_are_failed_and_sent_again(db: Database) -> None:
    parts = _steps(db, 1)
    with db.session() as s:
        mark_peer_copy(s, parts[1]["a"], "b", ReplicaState.COPYING)
        mark_peer_copy(s, parts[1]["b"], "a", ReplicaState.COPYING)  # b's own: not a's to touch
    with db.session() as s:
        assert interrupt_copies(s, "a") == 1
    with db.read_session() as s:
        assert peer_copies_of(s, _checkpoint_of(s, parts[1]["a"])) == [
            ("a", "b", "failed"),
            ("b", "a", "copying"),
        ]
    assert _to_send(db) == [(1, ())]


def _checkpoint_of(s: Session, part_id: int) -> int:
    part = s.get(Part, part_id)
    assert part is not None
    return part.checkpoint_id


def _drops(db: Database, keep_last: int | None = 1) -> list[tuple[int, str, str]]:
    with db.read_session() as s:
        steps = {c.id: c.step for c in s.query(Checkpoint)}
        return sorted(
            (steps[d.checkpoint_id], d.holder, d.reason) for d in copies_to_drop(s, "a", SHARED, keep_last)
        )


def test_copies_are_dropped_once_failed_durable_elsewhere_or_past_retention(db: Database) -> None:
    parts = _steps(db, 4)
    with db.session() as s:
        for step in (1, 2, 3, 4):
            mark_peer_copy(s, parts[step]["a"], "b", ReplicaState.VERIFIED)
        mark_peer_copy(s, parts[4]["a"], "c", ReplicaState.FAILED, "peer c: 507")
        s.add(PartReplica(part_id=parts[3]["a"], tier="pfs", state="verified"))
        held = s.get(Checkpoint, _checkpoint_of(s, parts[2]["a"]))
        assert held is not None
        held.pinned = True  # retention keeps it; a durable copy would not
    assert _drops(db) == [(1, "b", "retention"), (3, "b", "durable"), (4, "c", "failed")]
    assert _drops(db, keep_last=None) == [(3, "b", "durable"), (4, "c", "failed")]


def test_a_dead_holders_copies_are_written_off(db: Database) -> None:
    parts = _steps(db, 1)
    with db.session() as s:
        mark_peer_copy(s, parts[1]["a"], "b", ReplicaState.VERIFIED)
        mark_peer_copy(s, parts[1]["a"], "c", ReplicaState.VERIFIED)
    checkpoint_id = 0
    with db.session() as s:
        checkpoint_id = _checkpoint_of(s, parts[1]["a"])
        assert write_off_copies(s, "a", ["c", "d"]) == [(checkpoint_id, "b")]
    with db.read_session() as s:
        assert peer_copies_of(s, checkpoint_id) == [("a", "b", "failed"), ("a", "c", "verified")]
    assert _to_send(db, replicas=2) == [(1, ("c",))]
