"""Replica rows and their states (``catalog.replicas``), on SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import text

from tests.unit.catalog.helpers import BASE, TIERS, add_checkpoint, replica
from tierd.daemon.catalog import replicas as rp
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.part_replicas import mark_step_copying


def test_first_replicas_are_verified_on_tier0_and_pending_below(db: Database) -> None:
    cid = add_checkpoint(db, 1, (None, None, None, None))
    with db.session() as s:
        rp.add_first_replicas(s, cid, TIERS, location="/nvme/demo/step1", verified_at=BASE)
    with db.read_session() as s:
        rows = rp.replicas_by_tier(s, cid)
        first = rp.first_tier_replica(s, cid)
    assert {t: (r.tier_index, r.state, r.location) for t, r in rows.items()} == {
        "nvme": (0, "verified", "/nvme/demo/step1"),
        "pfs": (1, "pending", ""),
        "s3": (2, "pending", ""),
        "dr": (3, "pending", ""),
    }
    assert first is not None
    assert (first.tier, first.verified_at) == ("nvme", BASE)


def test_a_hop_marks_its_replica_copying_failed_then_verified(db: Database) -> None:
    cid = add_checkpoint(db, 1)
    with db.session() as s:
        row = rp.find_replica(s, cid, "pfs")
        assert row is not None
        rp.mark_replica_copying(row)
        assert rp.find_replica(s, cid, "nowhere") is None
    assert replica(db, cid, "pfs").state == "copying"
    with db.session() as s:
        row = rp.find_replica(s, cid, "pfs")
        assert row is not None
        rp.mark_replica_failed(row, "boom")
    assert (replica(db, cid, "pfs").state, replica(db, cid, "pfs").error) == ("failed", "boom")
    with db.session() as s:
        row = rp.find_replica(s, cid, "pfs")
        assert row is not None
        rp.mark_replica_copying(row)
        rp.mark_replica_verified(row, "/pfs/demo/step1", 3)
    done = replica(db, cid, "pfs")
    assert (done.state, done.error, done.location, done.bytes_done) == (
        "verified",
        None,
        "/pfs/demo/step1",
        3,
    )
    assert done.verified_at is not None


def test_requeue_resets_only_a_copying_replica(db: Database) -> None:
    cid = add_checkpoint(db, 1, ("verified", "copying", "failed", None))
    with db.session() as s:
        rp.requeue_copying_replica(s, cid, "pfs", 42)
        rp.requeue_copying_replica(s, cid, "s3", 42)
        rp.requeue_copying_replica(s, cid, "dr", 42)  # no row: nothing to do
        rp.add_pending_replica(s, cid, "dr", 3)
    assert (replica(db, cid, "pfs").state, replica(db, cid, "pfs").bytes_done) == ("pending", 42)
    assert (replica(db, cid, "s3").state, replica(db, cid, "s3").bytes_done) == ("failed", 0)
    assert (replica(db, cid, "dr").state, replica(db, cid, "dr").tier_index) == ("pending", 3)


def test_a_vanished_replica_is_deleted(db: Database) -> None:
    cid = add_checkpoint(db, 1)
    with db.session() as s:
        first = rp.first_tier_replica(s, cid)
        assert first is not None
        rp.mark_replica_deleted(first)
    assert replica(db, cid, "nvme").state == "deleted"


def test_a_parts_hop_marks_the_steps_replica_copying_once(db: Database) -> None:
    cid = add_checkpoint(db, 1, ("verified", "failed", "verified", "deleting"))
    for tier in ("pfs", "s3", "dr"):
        with db.session() as s:
            row = rp.find_replica(s, cid, tier)
            assert row is not None
            mark_step_copying(s, row)
    states = {t: replica(db, cid, t).state for t in ("pfs", "s3", "dr")}
    assert states == {"pfs": "copying", "s3": "verified", "dr": "deleting"}
    assert replica(db, cid, "pfs").error is None


def test_a_parts_hop_skips_the_steps_replica_another_part_is_marking(pg_db: Database) -> None:
    """Parts starting on many nodes at once: one marks the step's replica, none waits on it."""
    cid = add_checkpoint(pg_db, 1)
    with pg_db.session() as first:
        row = rp.find_replica(first, cid, "pfs")
        assert row is not None
        mark_step_copying(first, row)  # not committed yet: the row stays locked
        with pg_db.session() as second:
            second.execute(text("SET LOCAL lock_timeout = '5s'"))  # a wait would fail the test
            other = rp.find_replica(second, cid, "pfs")
            assert other is not None
            assert other.state == "pending"
            mark_step_copying(second, other)
    assert replica(pg_db, cid, "pfs").state == "copying"
