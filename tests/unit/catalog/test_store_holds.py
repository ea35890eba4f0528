"""Which replicas' objects need their store legal hold set, and recording it (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from tests.unit.catalog.helpers import add_checkpoint, replica
from tierd.daemon.catalog import protection
from tierd.daemon.catalog.audit import list_events
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Replica
from tierd.daemon.catalog.store_holds import StoreHoldDue, record_store_hold, store_holds_due

STATES = ("verified", "verified", "verified", "pending")


def due(db: Database, tier: str = "s3") -> list[StoreHoldDue]:
    with db.read_session() as s:
        return store_holds_due(s, tier, 50)


def hold(db: Database, checkpoint_id: int, name: str = "legal") -> None:
    with db.session() as s:
        protection.add_hold(s, checkpoint_id, name=name, reason="litigation", actor="admin")


def release(db: Database, checkpoint_id: int, name: str = "legal") -> None:
    with db.session() as s:
        protection.release_hold(s, checkpoint_id, name=name, actor="admin", reason="settled")


def record(db: Database, item: StoreHoldDue) -> bool:
    with db.session() as s:
        return record_store_hold(s, item, actor="retention")


def test_a_held_checkpoint_is_due_once_then_its_release_once(db: Database) -> None:
    held, free = add_checkpoint(db, 1, STATES), add_checkpoint(db, 2, STATES)
    assert due(db) == []  # nothing held: nothing is ever sent
    hold(db, held)
    [item] = due(db)
    assert (item.checkpoint_id, item.tier, item.on, item.relpaths) == (held, "s3", True, ["demo/step1/a"])
    assert due(db, "dr") == []  # a pending replica has no objects to hold yet
    assert record(db, item)
    assert due(db) == []  # recorded: not sent again
    hold(db, held, "second")
    release(db, held)
    assert due(db) == []  # still held by "second"
    release(db, held, "second")
    [off] = due(db)
    assert (off.checkpoint_id, off.on) == (held, False)
    assert record(db, off)
    assert due(db) == []
    assert replica(db, held, "s3").store_hold is False
    assert replica(db, free, "s3").store_hold is None
    with db.read_session() as s:
        actions = [(e.action, e.tier) for e in list_events(s, checkpoint_id=held)]
    assert ("store_hold", "s3") in actions
    assert ("store_release", "s3") in actions


def test_a_replica_verified_again_after_its_hold_was_set_is_due_again(db: Database) -> None:
    cid = add_checkpoint(db, 1, STATES)
    hold(db, cid)
    [item] = due(db)
    assert record(db, item)
    later = replica(db, cid, "s3").store_hold_at
    assert later is not None
    with db.session() as s:  # copied again (a bad copy repaired): new objects, without the hold
        again_at = later + timedelta(minutes=1)
        s.execute(update(Replica).where(Replica.id == item.replica_id).values(verified_at=again_at))
    [again] = due(db)
    assert (again.replica_id, again.on) == (item.replica_id, True)


def test_nothing_is_recorded_for_a_replica_verified_again_meanwhile(db: Database) -> None:
    cid = add_checkpoint(db, 1, STATES)
    hold(db, cid)
    [item] = due(db)
    with db.session() as s:
        s.execute(update(Replica).where(Replica.id == item.replica_id).values(verified_at=None))
    assert not record(db, item)
    assert replica(db, cid, "s3").store_hold is None


def test_a_released_replica_being_deleted_is_still_cleared(db: Database) -> None:
    cid = add_checkpoint(db, 1, STATES)
    hold(db, cid)
    [item] = due(db)
    assert record(db, item)
    release(db, cid)
    with db.session() as s:  # retention scheduled it before the pass cleared the hold
        s.execute(update(Replica).where(Replica.id == item.replica_id).values(state="deleting"))
    [off] = due(db)
    assert (off.replica_id, off.on) == (item.replica_id, False)
