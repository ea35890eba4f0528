"""The retention service over real POSIX tiers and a real catalog (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.fixtures.world import BASE, World, posix_tier
from tierd.daemon.catalog import protection, replica_deletions
from tierd.daemon.catalog.db import Database
from tierd.errors import Conflict

VERIFIED_BOTH = {"nvme": "verified", "pfs": "verified"}
LATER = BASE + timedelta(days=1)


def world(
    tmp_path: Path, db: Database, nvme: dict[str, object], pfs: dict[str, object] | None = None, **top: object
) -> World:
    tiers = [posix_tier(tmp_path, "nvme", **nvme), posix_tier(tmp_path, "pfs", **(pfs or {}))]
    return World.make(tmp_path, db, tiers, **top)


async def test_keep_last_deletes_older_steps_from_tier0_only(tmp_path: Path, db: Database) -> None:
    w = world(tmp_path, db, {"retention": {"keep_last": 2}, "delete_delay": 0})
    ids = [await w.add(step, on=VERIFIED_BOTH) for step in (10, 20, 30, 40)]
    report = await w.service.run_pass(LATER)
    assert report.scheduled == 2
    assert report.deleted == 2
    for old in ids[:2]:
        assert w.states(old) == {"nvme": "deleted", "pfs": "verified"}
        assert not w.exists("nvme", old)
        assert w.exists("pfs", old)
        assert ("deletion_scheduled", "nvme") in w.actions(old)
        assert ("deleted", "nvme") in w.actions(old)
    for kept in ids[2:]:
        assert w.states(kept) == VERIFIED_BOTH
        assert w.exists("nvme", kept)
    assert not list((tmp_path / "nvme" / "demo").glob(".*tierd-deleting"))


async def test_no_retention_block_keeps_everything(tmp_path: Path, db: Database) -> None:
    w = world(tmp_path, db, {})
    ids = [await w.add(step, on=VERIFIED_BOTH) for step in range(1, 6)]
    report = await w.service.run_pass(LATER)
    assert report.scheduled == 0
    assert report.outcomes == []
    assert all(w.states(i) == VERIFIED_BOTH for i in ids)


async def test_delay_then_undelete_pins_and_keeps(tmp_path: Path, db: Database) -> None:
    w = world(tmp_path, db, {"retention": {"keep_last": 1}, "delete_delay": "1h"})
    first, second, newest = [await w.add(step, on=VERIFIED_BOTH) for step in (1, 2, 3)]
    await w.service.run_pass(LATER)
    assert w.states(first)["nvme"] == "deleting"
    assert w.exists("nvme", first)
    after = w.replica(first, "nvme").delete_after
    assert after is not None
    assert after - LATER == timedelta(hours=1)
    with db.session() as s:
        assert replica_deletions.undelete(s, first, actor="alice", reason="needed for eval") == ["nvme"]
    assert w.checkpoint(first).pinned
    report = await w.service.run_pass(LATER + timedelta(hours=2))
    assert w.states(first) == VERIFIED_BOTH
    assert w.exists("nvme", first)
    assert w.states(second)["nvme"] == "deleted"
    assert not w.exists("nvme", second)
    assert w.states(newest) == VERIFIED_BOTH
    assert report.deleted == 1


async def test_flipped_byte_in_durable_copy_blocks_delete_and_marks_it_failed(
    tmp_path: Path, db: Database
) -> None:
    w = world(tmp_path, db, {"retention": {"keep_last": 1}, "delete_delay": "1h"})
    old = await w.add(1, on=VERIFIED_BOTH)
    await w.add(2, on=VERIFIED_BOTH)
    await w.service.run_pass(LATER)
    shard = w.tier_path("pfs", "demo/step00001/shard0.distcp")
    data = bytearray(shard.read_bytes())
    data[100] ^= 0x01
    shard.write_bytes(bytes(data))
    report = await w.service.run_pass(LATER + timedelta(hours=2))
    assert [o.result for o in report.outcomes] == ["refused"]
    assert w.states(old) == {"nvme": "verified", "pfs": "failed"}
    assert w.exists("nvme", old)
    assert ("reverify_failed", "pfs") in w.actions(old)
    assert ("deletion_refused", "nvme") in w.actions(old)
    metrics = w.service.ctx.metrics
    assert metrics.reverify_failures.labels("pfs")._value.get() == 1


async def test_size_mode_recheck_misses_a_flip_but_catches_truncation(tmp_path: Path, db: Database) -> None:
    w = world(
        tmp_path, db, {"retention": {"keep_last": 1}, "delete_delay": 0}, {"verify_before_delete": "size"}
    )
    old = await w.add(1, on=VERIFIED_BOTH)
    await w.add(2, on=VERIFIED_BOTH)
    shard = w.tier_path("pfs", "demo/step00001/shard1.distcp")
    shard.write_bytes(shard.read_bytes()[:-1])
    await w.service.run_pass(LATER)
    assert w.states(old) == {"nvme": "verified", "pfs": "failed"}


@pytest.mark.parametrize("protect", ["pin", "hold"])
async def test_pinned_or_held_checkpoint_is_kept_everywhere(
    tmp_path: Path, db: Database, protect: str
) -> None:
    w = world(
        tmp_path, db, {"retention": {"keep_last": 1}, "delete_delay": 0}, {"retention": {"keep_last": 1}}
    )
    old = await w.add(1, on=VERIFIED_BOTH)
    await w.add(2, on=VERIFIED_BOTH)
    with db.session() as s:
        if protect == "pin":
            protection.pin(s, old, actor="alice", reason="golden", durable_tiers=["pfs"])
        else:
            protection.add_hold(s, old, name="litigation-42", reason="legal", actor="admin")
    await w.service.run_pass(LATER)
    assert w.states(old) == VERIFIED_BOTH
    with db.session() as s, pytest.raises(Conflict):
        replica_deletions.schedule_checkpoint_deletion(
            s, old, delays={}, now=LATER, actor="bob", reason="cleanup"
        )


async def test_every_tier_dropping_it_deletes_the_checkpoint(tmp_path: Path, db: Database) -> None:
    keep1 = {"retention": {"keep_last": 1}, "delete_delay": 0}
    w = world(tmp_path, db, keep1, keep1)
    old = await w.add(1, on=VERIFIED_BOTH)
    await w.add(2, on=VERIFIED_BOTH)
    report = await w.service.run_pass(LATER)
    assert report.deleted == 2
    assert w.states(old) == {"nvme": "deleted", "pfs": "deleted"}
    assert w.checkpoint(old).state == "deleted"
    assert not w.exists("nvme", old)
    assert not w.exists("pfs", old)


async def test_tier0_copy_without_durable_copy_elsewhere_stays(tmp_path: Path, db: Database) -> None:
    w = world(tmp_path, db, {"retention": {"keep_last": 1}, "delete_delay": 0})
    pending = await w.add(1, on={"nvme": "verified", "pfs": "pending"})
    await w.add(2, on=VERIFIED_BOTH)
    await w.service.run_pass(LATER)
    assert w.states(pending) == {"nvme": "verified", "pfs": "pending"}
    assert w.exists("nvme", pending)


async def test_dry_run_deletes_nothing(tmp_path: Path, db: Database) -> None:
    keep1 = {"retention": {"keep_last": 1}, "delete_delay": 0}
    w = world(tmp_path, db, keep1, keep1, retention={"dry_run": True})
    ids = [await w.add(step, on=VERIFIED_BOTH) for step in (1, 2, 3)]
    report = await w.service.run_pass(LATER)
    assert report.dry_run
    assert report.scheduled == 0
    assert all(w.states(i) == VERIFIED_BOTH and w.exists("nvme", i) for i in ids)


async def test_begun_deletion_is_finished_after_a_restart(tmp_path: Path, db: Database) -> None:
    w = world(tmp_path, db, {"retention": {"keep_last": 1}, "delete_delay": 0})
    old = await w.add(1, on=VERIFIED_BOTH)
    await w.add(2, on=VERIFIED_BOTH)
    with db.session() as s:
        assert replica_deletions.schedule_replica_deletion(
            s,
            old,
            "nvme",
            delete_after=LATER,
            origin=replica_deletions.Origin.RETENTION,
            reason="keep_last",
            policy="keep_last",
            actor="retention",
        )
        replica_id = w.replica(old, "nvme").id
        assert replica_deletions.begin_deletion(s, replica_id, LATER)
    # The crash came after the directory was renamed out of sight and one file was removed.
    top = w.tier_path("nvme", "demo/step00001")
    trash = top.with_name(".step00001.tierd-deleting")
    top.rename(trash)
    (trash / "shard0.distcp").unlink()
    restarted = World.make(
        tmp_path,
        db,
        [
            posix_tier(tmp_path, "nvme", retention={"keep_last": 1}, delete_delay=0),
            posix_tier(tmp_path, "pfs"),
        ],
    )
    report = await restarted.service.run_pass(LATER)
    assert [o.result for o in report.outcomes] == ["deleted"]
    assert w.states(old) == {"nvme": "deleted", "pfs": "verified"}
    assert not trash.exists()
    assert not top.exists()


async def test_unrecorded_files_survive_a_deletion(tmp_path: Path, db: Database) -> None:
    w = world(tmp_path, db, {"retention": {"keep_last": 1}, "delete_delay": 0})
    old = await w.add(1, on=VERIFIED_BOTH)
    await w.add(2, on=VERIFIED_BOTH)
    stray = w.tier_path("nvme", "demo/step00001/notes.txt")
    stray.write_text("written after the step was recorded")
    await w.service.run_pass(LATER)
    assert w.states(old)["nvme"] == "deleted"
    assert stray.exists()
    assert not w.exists("nvme", old)


async def test_policy_that_keeps_again_cancels_a_scheduled_deletion(tmp_path: Path, db: Database) -> None:
    w = world(
        tmp_path,
        db,
        {"retention": {"keep_best": {"metric": "loss", "n": 1, "mode": "min"}}, "delete_delay": "1h"},
    )
    worse = await w.add(1, on=VERIFIED_BOTH, metrics={"loss": 2.0})
    best = await w.add(2, on=VERIFIED_BOTH, metrics={"loss": 1.0})
    await w.add(3, on=VERIFIED_BOTH, metrics={"loss": 3.0})
    await w.service.run_pass(LATER)
    assert w.states(worse)["nvme"] == "deleting"
    assert w.states(best)["nvme"] == "verified"
    with db.session() as s:
        protection.set_metrics(s, worse, {"loss": 0.5}, actor="job")
    report = await w.service.run_pass(LATER + timedelta(minutes=5))
    assert (report.cancelled, report.scheduled) == (1, 1)  # step 1 is best now, step 2 is not
    assert w.states(worse)["nvme"] == "verified"
    assert w.states(best)["nvme"] == "deleting"


async def test_an_idle_pass_does_not_plan_again(
    tmp_path: Path, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = world(tmp_path, db, {"retention": {"keep_last": 5}, "delete_delay": 0})
    for step in (1, 2):
        await w.add(step, on=VERIFIED_BOTH)
    plans: list[object] = []
    real = w.service.snapshot

    def counted(now: object = None) -> object:
        plans.append(now)
        return real(now)  # type: ignore[arg-type]

    monkeypatch.setattr(w.service, "snapshot", counted)
    await w.service.run_pass(LATER)
    await w.service.run_pass(LATER + timedelta(minutes=1))
    assert len(plans) == 1
    await w.add(3, on=VERIFIED_BOTH)  # a change in the catalog: planned again
    await w.service.run_pass(LATER + timedelta(minutes=2))
    assert len(plans) == 2
    w.service.wake()
    await w.service.run_pass(LATER + timedelta(minutes=3))
    assert len(plans) == 3
    await w.service.run_pass(LATER + timedelta(minutes=30))  # REPLAN_SECONDS passed
    assert len(plans) == 4


async def test_a_keep_within_window_moving_past_a_checkpoint_plans_again(
    tmp_path: Path, db: Database
) -> None:
    w = world(tmp_path, db, {"retention": {"keep_within": "2h"}, "delete_delay": 0})
    old = await w.add(1, on=VERIFIED_BOTH, minutes=0)
    await w.add(2, on=VERIFIED_BOTH, minutes=5)
    await w.service.run_pass(BASE + timedelta(minutes=30))
    assert w.states(old)["nvme"] == "verified"
    # Nothing changed in the catalog, but step 1 left its 2 h window at BASE + 2 h.
    await w.service.run_pass(BASE + timedelta(hours=2, minutes=1))
    assert w.states(old)["nvme"] == "deleted"


async def test_dry_run_logs_each_decision_once(tmp_path: Path, db: Database) -> None:
    keep1 = {"retention": {"keep_last": 1}, "delete_delay": 0}
    w = world(tmp_path, db, keep1, retention={"dry_run": True})
    for step in (1, 2, 3):
        await w.add(step, on=VERIFIED_BOTH)
    with capture_logs() as first:
        await w.service.run_pass(LATER)
    w.service.wake()
    with capture_logs() as second:
        await w.service.run_pass(LATER + timedelta(minutes=1))
    would = [e for e in first if e["event"] == "retention_dry_run_would_delete"]
    assert sorted(e["checkpoint"] for e in would) == [1, 2]
    assert not [e for e in second if e["event"] == "retention_dry_run_would_delete"]
    assert [e["would_delete"] for e in second if e["event"] == "retention_dry_run"] == [{"nvme": 2, "pfs": 0}]
