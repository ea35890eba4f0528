"""The scrubber over real POSIX tiers and a real catalog: order, schedule, bandwidth, rot, races.

The catalog's queries and conditional marks run on SQLite and PostgreSQL (``db``).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from sqlalchemy import update

from tests.unit.scrub.helpers import (
    NOW,
    FakeClock,
    checksum_of,
    events,
    flip_byte,
    relpaths,
    sample,
    scrub_world,
    scrubber,
    set_checked,
    set_state,
)
from tierd.daemon.backends.base import ObjectInfo
from tierd.daemon.backends.posix.backend import PosixBackend
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint
from tierd.daemon.catalog.scrub import due_for_scrub, scrub_progress
from tierd.errors import TransientBackendError

ALL = {"nvme": "verified", "pfs": "verified", "archive": "verified"}
WEEK = timedelta(days=7)


def _due(db: Database, tier: str, *, node: str | None = None, limit: int = 50) -> list[int]:
    with db.read_session() as s:
        return [c.checkpoint_id for c in due_for_scrub(s, tier, NOW - WEEK, limit, node=node)]


async def test_never_checked_replicas_go_first_then_the_oldest_check(tmp_path: Path, db: Database) -> None:
    world = scrub_world(tmp_path, db)
    c1, c2, c3, c4 = [await world.add(step, on=ALL, files=1, size=10) for step in (1, 2, 3, 4)]
    set_checked(db, c1, "pfs", NOW - timedelta(days=8))
    set_checked(db, c3, "pfs", NOW - timedelta(days=9))
    set_checked(db, c4, "pfs", NOW - timedelta(hours=1))  # checked within the week: not due
    assert _due(db, "pfs") == [c2, c3, c1]
    assert _due(db, "pfs", limit=2) == [c2, c3]
    with db.session() as s:
        s.execute(update(Checkpoint).where(Checkpoint.id == c2).values(node="other-node"))
    assert _due(db, "pfs", node="this-node") == [c3, c1]  # a node-local tier: its own node's
    set_state(db, c3, "pfs", "failed")  # only verified replicas are scrubbed
    assert _due(db, "pfs") == [c2, c1]


async def test_a_round_checks_what_is_due_and_a_pass_ends_when_nothing_is(
    tmp_path: Path, db: Database
) -> None:
    world = scrub_world(tmp_path, db)
    ids = [await world.add(step, on=ALL, files=1, size=10) for step in (1, 2)]
    now = [NOW]
    service = scrubber(world, now=lambda: now[0])
    assert service.last_pass_at["pfs"] is None

    assert await service.check_round("pfs") == 2
    for cid in ids:
        replica = world.replica(cid, "pfs")
        assert (replica.state, replica.checked_at) == ("verified", NOW)
        assert replica.verified_at == world.checkpoint(cid).created_at  # still "first verified"
        assert world.replica(cid, "archive").checked_at is None  # each tier on its own
    assert await service.check_round("pfs") == 0
    assert service.last_pass_at["pfs"] == NOW
    with db.read_session() as s:
        progress = scrub_progress(s, "pfs", NOW - WEEK)
    assert (progress.checked, progress.total, progress.oldest_check) == (2, 2, NOW)
    assert sample(world, "tierd_scrub_replicas_total", tier="pfs", result="ok") == 2

    now[0] = NOW + WEEK + timedelta(seconds=1)  # a week later every replica is due again
    assert await service.check_round("pfs") == 2
    assert world.replica(ids[0], "pfs").checked_at == now[0]


async def test_the_bytes_read_are_held_to_the_bandwidth(tmp_path: Path, sqlite_db: Database) -> None:
    world = scrub_world(tmp_path, sqlite_db, bandwidth="10kB")
    for step in (1, 2, 3):
        await world.add(step, on=ALL, files=2, size=10_000)
    total = sum(world.sizes.values())
    largest = 10_000
    clock = FakeClock()
    service = scrubber(world, clock=clock)
    assert await service.check_round("pfs") == 3
    rate, burst = 10_000, 1_000
    # Each file is paid for before it is read, and a payment waits until the earlier ones are
    # repaid at the rate: the clock moves by every byte's share, less the bucket's burst (a
    # tenth of a second's bytes, there at the start) and the last file's.
    assert (total - burst - largest) / rate <= clock.now <= total / rate + 0.01
    assert sample(world, "tierd_scrub_bytes_total", tier="pfs") == total


async def test_a_flipped_byte_marks_the_replica_failed_audits_it_and_wakes_the_pipeline(
    tmp_path: Path, db: Database
) -> None:
    world = scrub_world(tmp_path, db)
    cid = await world.add(1, on=ALL)
    bad = relpaths(world, cid)[-1]
    flip_byte(world.tier_path("pfs", bad), offset=100)
    service = scrubber(world)
    ctx = world.service.ctx
    ctx.pipeline_wakeup.clear()

    assert await service.check_round("pfs") == 1
    replica = world.replica(cid, "pfs")
    assert replica.state == "failed"
    assert bad in (replica.error or "")
    assert world.replica(cid, "archive").state == "verified"
    [mismatch] = events(db, "replica_mismatch")
    assert (mismatch.actor, mismatch.tier, mismatch.checkpoint_id) == ("scrub", "pfs", cid)
    assert mismatch.detail["file"] == bad
    assert mismatch.detail["problem"] == "mismatch"
    expected = checksum_of(world, cid, bad)
    assert mismatch.detail["expected"] == expected
    assert mismatch.detail["actual"] not in (None, expected)
    assert [e.tier for e in events(db, "reverify_failed")] == ["pfs"]
    assert ctx.pipeline_wakeup.is_set()
    assert sample(world, "tierd_scrub_mismatches_total", tier="pfs") == 1
    assert sample(world, "tierd_scrub_replicas_total", tier="pfs", result="mismatch") == 1


async def test_a_deleted_file_is_missing(tmp_path: Path, sqlite_db: Database) -> None:
    world = scrub_world(tmp_path, sqlite_db)
    cid = await world.add(1, on=ALL)
    gone = relpaths(world, cid)[0]
    world.tier_path("archive", gone).unlink()
    service = scrubber(world)
    assert await service.check_round("archive") == 1
    assert world.replica(cid, "archive").state == "failed"
    [event] = events(sqlite_db, "replica_mismatch")
    assert (event.detail["file"], event.detail["problem"], event.detail["actual"]) == (gone, "missing", None)
    assert sample(world, "tierd_scrub_replicas_total", tier="archive", result="missing") == 1


async def test_a_replica_deleted_while_it_is_checked_is_not_rot(tmp_path: Path, db: Database) -> None:
    world = scrub_world(tmp_path, db)
    cid = await world.add(1, on=ALL)
    service = scrubber(world)
    with db.read_session() as s:
        [candidate] = due_for_scrub(s, "pfs", NOW - WEEK, 10)
    # Retention takes the replica meanwhile: deleting, then its bytes removed.
    set_state(db, cid, "pfs", "deleting")
    for relpath in relpaths(world, cid):
        world.tier_path("pfs", relpath).unlink()

    outcome = await service.check(candidate)
    assert outcome.result == "gone"
    assert world.replica(cid, "pfs").state == "deleting"
    assert events(db, "replica_mismatch") == []
    assert sample(world, "tierd_scrub_mismatches_total", tier="pfs") == 0


async def test_shared_tiers_are_scrubbed_by_the_leader_alone(tmp_path: Path, sqlite_db: Database) -> None:
    world = scrub_world(tmp_path, sqlite_db)
    cid = await world.add(1, on=ALL)
    service = scrubber(world)
    world.service.ctx.leader = False
    assert await service.check_round("pfs") == 0
    assert world.replica(cid, "pfs").checked_at is None
    world.service.ctx.leader = True
    assert await service.check_round("pfs") == 1


async def test_verify_checks_every_tier_now(tmp_path: Path, sqlite_db: Database) -> None:
    world = scrub_world(tmp_path, sqlite_db)
    cid = await world.add(1, on={"nvme": "deleted", "pfs": "verified", "archive": "verified"})
    bad = relpaths(world, cid)[0]
    flip_byte(world.tier_path("archive", bad))
    service = scrubber(world)
    outcomes = await service.verify(cid, actor="api:ops")
    assert [(o.tier, o.result) for o in outcomes] == [
        ("nvme", "skipped"),
        ("pfs", "ok"),
        ("archive", "mismatch"),
    ]
    assert [b.relpath for b in outcomes[2].bad] == [bad]
    assert world.replica(cid, "archive").state == "failed"
    assert events(sqlite_db, "replica_mismatch")[0].actor == "api:ops"
    assert world.replica(cid, "pfs").checked_at == NOW


class Unanswering(PosixBackend):
    """A tier whose store does not answer (a network partition, throttling)."""

    async def verify(self, relpath: str, expected_checksum: str) -> ObjectInfo:
        raise TransientBackendError(f"{self.location(relpath)}: connection reset")


async def test_a_store_that_does_not_answer_proves_nothing(tmp_path: Path, sqlite_db: Database) -> None:
    world = scrub_world(tmp_path, sqlite_db)
    cid = await world.add(1, on=ALL)
    world.backends["pfs"] = Unanswering(world.config.tier("pfs"))  # type: ignore[arg-type]
    service = scrubber(world)
    # Nothing counted as checked: the loop waits before it asks the store again.
    assert await service.check_round("pfs") == 0
    replica = world.replica(cid, "pfs")
    assert (replica.state, replica.checked_at) == ("verified", None)
    assert events(sqlite_db, "replica_mismatch") == []
    assert sample(world, "tierd_scrub_replicas_total", tier="pfs", result="inconclusive") == 1
