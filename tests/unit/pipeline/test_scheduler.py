"""Scheduler decisions: the pure rules, and a pass over a real catalog (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.unit.catalog.helpers import TIERS, add_checkpoint, jobs, replica, set_replica
from tierd.daemon.catalog import jobs as joblib
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import JobState, ReplicaState
from tierd.daemon.pipeline.scheduler import Hop, choose_source, next_hops, priority_of, schedule_pass

V, P, F, C, D, X = "verified", "pending", "failed", "copying", "deleted", "deleting"


@pytest.mark.parametrize(
    ("states", "hops"),
    [
        ((V, P, P, P), [Hop(0, 1)]),  # fresh checkpoint: first hop only
        ((V, V, P, P), [Hop(1, 2)]),  # next hop starts from the tier just verified
        ((V, V, V, P), [Hop(2, 3)]),
        ((V, V, V, V), []),  # done
        ((V, C, P, P), [Hop(0, 1)]),  # copying without a job (crash): copy again
        ((V, F, P, P), [Hop(0, 1)]),  # failed: retried (unless a failed job says otherwise)
        ((D, V, P, P), [Hop(1, 2)]),  # tier 0 pruned: later hops do not care
        ((V, D, P, P), [Hop(0, 2)]),  # tier 1 copy gone: fall back to tier 0
        ((V, X, D, P), [Hop(0, 3)]),  # several gone in a row
        ((V, V, D, P), [Hop(1, 3)]),  # nearest verified wins
        ((V, P, D, P), [Hop(0, 1)]),  # tier 3 waits for tier 1, which is on its way
        ((D, D, P, P), []),  # no verified copy anywhere: nothing to copy from
        ((P, P, P, P), []),  # tier 0 not verified (never happens, but no hop)
        ((V, None, P, P), [Hop(0, 1)]),  # missing row (tier added later) counts as pending
        ((V, V, F, P), [Hop(1, 2)]),  # tier 3 waits for failed tier 2 to be retried
        # Repairs when no earlier copy is left: from the nearest later verified tier.
        ((D, F, V, V), [Hop(2, 1)]),  # tier 1 rotted, tier 0 deleted: from tier 2
        ((D, F, D, V), [Hop(3, 1)]),  # tiers 0 and 2 gone: from tier 3
        ((X, F, F, V), [Hop(3, 1)]),  # tier 2 waits for tier 1, which is repaired first
        ((F, F, V, V), [Hop(2, 1)]),  # a failed tier 0 is never copied again: not waited for
        ((V, F, V, V), [Hop(0, 1)]),  # an earlier verified copy still goes first
        ((D, F, P, P), []),  # nothing verified anywhere: nothing to repair from
    ],
)
def test_next_hops(states: tuple[str | None, ...], hops: list[Hop]) -> None:
    assert next_hops(states) == hops


def test_choose_source_prefers_the_previous_tier() -> None:
    assert choose_source((V, V, P), 2) == 1
    assert choose_source((V, D, P), 2) == 0
    assert choose_source((V, C, P), 2) is None


def test_newer_checkpoints_get_higher_priority() -> None:
    older = priority_of(datetime(2026, 1, 1, 0, 0, tzinfo=UTC))
    newer = priority_of(datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=UTC))
    assert newer > older


def test_pass_queues_the_next_hop_once(db: Database) -> None:
    cid = add_checkpoint(db, 1)
    assert schedule_pass(db, TIERS) == 1
    assert schedule_pass(db, TIERS) == 0  # idempotent: the open job covers the hop
    [job] = jobs(db)
    assert (job.checkpoint_id, job.src_tier, job.dst_tier, job.state) == (cid, "nvme", "pfs", "queued")


def test_pass_schedules_every_complete_checkpoint_newest_first(db: Database) -> None:
    old = add_checkpoint(db, 1)
    new = add_checkpoint(db, 2)
    mid = add_checkpoint(db, 3, minutes=0)  # a higher step but created first
    add_checkpoint(db, 4, state="waiting")  # not complete: does not move
    add_checkpoint(db, 5, (F, P, P, P), state="changed")  # tier 0 rewritten before any copy: no source
    pinned = add_checkpoint(db, 6, (V, V, V, V))  # fully replicated: nothing to do
    assert schedule_pass(db, TIERS) == 3
    claimed = [joblib.claim_next_copy_job(db, "n:1", ["pfs"], lease_seconds=60) for _ in range(4)]
    assert [c.checkpoint_id if c else None for c in claimed] == [new, old, mid, None]
    assert all(j.checkpoint_id != pinned for j in jobs(db))


def test_a_changed_checkpoint_moves_on_from_its_verified_first_sight_copy(db: Database) -> None:
    """Tier 0 was rewritten after first sight (its replica failed); pfs holds the first-sight bytes."""
    cid = add_checkpoint(db, 1, (F, V, P, P), state="changed")
    assert schedule_pass(db, TIERS) == 1
    assert [(j.checkpoint_id, j.src_tier, j.dst_tier) for j in jobs(db)] == [(cid, "pfs", "s3")]


def test_a_pass_over_named_checkpoints_schedules_only_them(db: Database) -> None:
    first = add_checkpoint(db, 1)
    second = add_checkpoint(db, 2)
    assert schedule_pass(db, TIERS, only={second}) == 1
    assert [j.checkpoint_id for j in jobs(db)] == [second]
    assert schedule_pass(db, TIERS, only=set()) == 0
    assert schedule_pass(db, TIERS) == 1  # the poll's full pass finds the other
    assert sorted(j.checkpoint_id for j in jobs(db)) == [first, second]


def test_pass_follows_verified_replicas_down_the_chain(db: Database) -> None:
    cid = add_checkpoint(db, 1)
    schedule_pass(db, TIERS)
    [job] = jobs(db)
    _finish(db, job.id)
    set_replica(db, cid, "pfs", ReplicaState.VERIFIED)
    assert schedule_pass(db, TIERS) == 1
    assert [(j.src_tier, j.dst_tier, j.state) for j in jobs(db)] == [
        ("nvme", "pfs", "done"),
        ("pfs", "s3", "queued"),
    ]


def test_failed_job_blocks_rescheduling_of_its_hop(db: Database) -> None:
    cid = add_checkpoint(db, 1, (V, F, P, P))
    schedule_pass(db, TIERS)
    [job] = jobs(db)
    _finish(db, job.id, JobState.FAILED)
    assert schedule_pass(db, TIERS) == 0
    assert replica(db, cid, "pfs").state == "failed"


def test_pass_creates_missing_replica_rows(db: Database) -> None:
    cid = add_checkpoint(db, 1, (V, V, V, None))
    assert schedule_pass(db, TIERS) == 0  # only at start-up (the tier list changes with the config)
    assert schedule_pass(db, TIERS, fill_missing=True) == 1
    row = replica(db, cid, "dr")
    assert (row.state, row.tier_index) == ("pending", 3)
    assert [(j.src_tier, j.dst_tier) for j in jobs(db)] == [("s3", "dr")]


def _finish(db: Database, job_id: int, state: JobState = JobState.DONE) -> None:
    from tierd.daemon.catalog.models import Job

    with db.session() as s:
        job = s.get(Job, job_id)
        assert job is not None
        job.state = state.value


def test_an_idle_pass_takes_no_write_lock(sqlite_db: Database) -> None:
    add_checkpoint(sqlite_db, 1, (V, V, V, V))
    impatient = Database(sqlite_db.url, busy_timeout_ms=100)
    try:
        with sqlite_db.session():  # another writer holds the lock (BEGIN IMMEDIATE)
            assert schedule_pass(impatient, TIERS) == 0  # would time out if it asked for the lock
    finally:
        impatient.dispose()
