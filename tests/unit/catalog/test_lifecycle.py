"""Pins, holds, metrics and two-phase deletion in the catalog (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.orm import selectinload

from tests.unit.catalog.helpers import BASE, add_checkpoint, jobs, replica
from tierd.daemon.catalog import protection, replica_deletions
from tierd.daemon.catalog.audit import list_events
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.jobs import enqueue_copy_job
from tierd.daemon.catalog.models import Checkpoint
from tierd.daemon.catalog.replica_deletions import Origin
from tierd.daemon.catalog.retention import load_retention_rows
from tierd.errors import Conflict, NotFound

ALL_VERIFIED = ("verified", "verified", "verified", "verified")


def actions(db: Database, checkpoint_id: int) -> list[str]:
    with db.read_session() as s:
        return [e.action for e in list_events(s, checkpoint_id=checkpoint_id)]


def checkpoint(db: Database, checkpoint_id: int) -> Checkpoint:
    with db.read_session() as s:
        row = s.get(Checkpoint, checkpoint_id, options=[selectinload(Checkpoint.holds)])
        assert row is not None
        return row


def schedule(db: Database, checkpoint_id: int, tier: str, *, minutes: int = 60) -> None:
    with db.session() as s:
        assert replica_deletions.schedule_replica_deletion(
            s,
            checkpoint_id,
            tier,
            delete_after=BASE + timedelta(minutes=minutes),
            origin=Origin.RETENTION,
            reason="keep_last: not among the newest 1",
            policy="keep_last",
            actor="retention",
        )


def test_pin_cancels_pending_deletions_and_copies_dropped_durable_replicas_again(db: Database) -> None:
    cid = add_checkpoint(db, 1, ("verified", "verified", "deleted", "deleted"))
    schedule(db, cid, "nvme")
    with db.session() as s:
        protection.pin(s, cid, actor="alice", reason="golden", durable_tiers=["pfs", "s3"])
    assert checkpoint(db, cid).pinned
    assert replica(db, cid, "nvme").state == "verified"
    assert replica(db, cid, "s3").state == "pending"  # durable: copied again
    assert replica(db, cid, "dr").state == "deleted"  # not durable here: left alone
    assert actions(db, cid) == ["deletion_scheduled", "pin"]
    with db.session() as s:
        protection.unpin(s, cid, actor="alice", reason="done")
    assert not checkpoint(db, cid).pinned


def test_holds_are_named_once_and_released_by_name(db: Database) -> None:
    cid = add_checkpoint(db, 1, ALL_VERIFIED)
    with db.session() as s:
        protection.add_hold(s, cid, name="case-7", reason="litigation", actor="admin")
    with db.session() as s, pytest.raises(Conflict, match="case-7"):
        protection.add_hold(s, cid, name="case-7", reason="again", actor="admin")
    with db.session() as s, pytest.raises(NotFound):
        protection.release_hold(s, cid, name="other", actor="admin", reason="x")
    with db.session() as s:
        protection.release_hold(s, cid, name="case-7", actor="admin", reason="case closed")
    assert checkpoint(db, cid).holds == []
    assert actions(db, cid) == ["hold", "release"]


def test_metrics_merge_and_a_missing_checkpoint_is_not_found(db: Database) -> None:
    cid = add_checkpoint(db, 1, ALL_VERIFIED)
    with db.session() as s:
        protection.set_metrics(s, cid, {"eval_loss": 2.0, "acc": 0.5}, actor="job")
    with db.session() as s:
        protection.set_metrics(s, cid, {"eval_loss": 1.5}, actor="job")
    assert checkpoint(db, cid).metrics == {"eval_loss": 1.5, "acc": 0.5}
    with db.session() as s, pytest.raises(NotFound):
        protection.set_metrics(s, cid + 1000, {"x": 1.0}, actor="job")


def test_api_deletion_refuses_pinned_and_held_and_drops_unverified_copies_at_once(db: Database) -> None:
    cid = add_checkpoint(db, 1, ("verified", "verified", "copying", None))
    with db.session() as s:
        protection.pin(s, cid, actor="a", reason="r", durable_tiers=[])
    with db.session() as s, pytest.raises(Conflict, match="pinned"):
        replica_deletions.schedule_checkpoint_deletion(s, cid, delays={}, now=BASE, actor="bob", reason="x")
    with db.session() as s:
        protection.unpin(s, cid, actor="a", reason="r")
        tiers = replica_deletions.schedule_checkpoint_deletion(
            s,
            cid,
            delays={"nvme": timedelta(0), "pfs": timedelta(hours=1)},
            now=BASE,
            actor="bob",
            reason="bad run",
        )
    assert tiers == ["nvme", "pfs", "s3"]
    s3 = replica(db, cid, "s3")
    assert s3.state == "deleting"
    assert s3.delete_after == BASE  # a copy on its way holds nothing worth a delay
    pfs = replica(db, cid, "pfs")
    assert pfs.state == "deleting"
    assert pfs.delete_after == BASE + timedelta(hours=1)
    assert Origin.of(pfs.delete_reason) is Origin.API


def test_undelete_before_the_deletion_begins_but_not_after(db: Database) -> None:
    cid = add_checkpoint(db, 1, ALL_VERIFIED)
    schedule(db, cid, "nvme")
    schedule(db, cid, "pfs")
    nvme_id = replica(db, cid, "nvme").id
    with db.session() as s:
        assert not replica_deletions.begin_deletion(s, nvme_id, BASE)  # its time has not come
        assert replica_deletions.begin_deletion(s, nvme_id, BASE + timedelta(hours=2))
    with db.session() as s:
        assert replica_deletions.undelete(s, cid, actor="alice", reason="oops") == ["pfs"]
    assert replica(db, cid, "nvme").state == "deleting"
    assert replica(db, cid, "pfs").state == "verified"
    assert checkpoint(db, cid).pinned
    with db.session() as s, pytest.raises(Conflict):
        replica_deletions.undelete(s, cid, actor="alice", reason="again")


def test_the_last_replica_deleted_deletes_the_checkpoint(db: Database) -> None:
    cid = add_checkpoint(db, 1, ("verified", "deleted", None, None))
    schedule(db, cid, "nvme", minutes=0)
    (due,) = [d for d in deletions_due(db) if d.checkpoint_id == cid]
    assert (due.tier, due.origin, due.begun) == ("nvme", Origin.RETENTION, False)
    with db.session() as s:
        assert replica_deletions.begin_deletion(s, due.replica_id, BASE)
        replica_deletions.finish_deletion(s, due.replica_id, actor="retention")
    assert replica(db, cid, "nvme").state == "deleted"
    assert checkpoint(db, cid).state == "deleted"
    assert actions(db, cid)[-1] == "deleted"


def test_a_begun_deletion_refused_after_a_restart_is_copied_again(db: Database) -> None:
    cid = add_checkpoint(db, 1, ALL_VERIFIED)
    schedule(db, cid, "nvme", minutes=0)
    nvme_id = replica(db, cid, "nvme").id
    with db.session() as s:
        assert replica_deletions.begin_deletion(s, nvme_id, BASE)
        replica_deletions.abandon_deletion(s, nvme_id, reason="pinned", actor="retention", touched=True)
    row = replica(db, cid, "nvme")
    assert row.state == "failed"
    assert row.error is not None
    assert "interrupted" in row.error


def deletions_due(db: Database) -> list[replica_deletions.DueDeletion]:
    with db.read_session() as s:
        return replica_deletions.due_deletions(s, BASE, ["nvme", "pfs", "s3", "dr"])


def test_origin_is_read_back_from_the_stored_reason() -> None:
    assert Origin.of(Origin.EVICTION.tag("disk full")) is Origin.EVICTION
    assert Origin.of("something else: with a colon") is Origin.RETENTION
    assert Origin.of(None) is Origin.RETENTION


def test_deleting_a_checkpoint_cancels_its_copies(db: Database) -> None:
    cid = add_checkpoint(db, 1, ("verified", "pending", None, None))
    with db.session() as s:
        enqueue_copy_job(s, cid, "nvme", "pfs", 1)
    with db.session() as s:
        replica_deletions.schedule_checkpoint_deletion(
            s, cid, delays={}, now=BASE, actor="bob", reason="bad run"
        )
    (job,) = jobs(db)
    assert job.state == "cancelled"
    assert job.last_error is not None
    assert "being deleted" in job.last_error


def test_only_a_running_copy_holds_its_checkpoint_in_use(db: Database) -> None:
    queued = add_checkpoint(db, 1, ("verified", "pending", None, None))
    running = add_checkpoint(db, 2, ("verified", "copying", None, None))
    with db.session() as s:
        enqueue_copy_job(s, queued, "nvme", "pfs", 1)
        enqueue_copy_job(s, running, "nvme", "pfs", 2).state = "running"
    with db.read_session() as s:
        rows = {r.id: r for r in load_retention_rows(s)}
    assert (rows[queued].in_use, rows[running].in_use) == (False, True)
