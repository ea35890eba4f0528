"""Copy jobs under leases (``catalog.jobs``), on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, select

from tests.unit.catalog.helpers import TIERS, add_checkpoint, jobs, replica, set_replica
from tierd.daemon.catalog import dialect
from tierd.daemon.catalog import jobs as joblib
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Job, ReplicaState, utcnow
from tierd.daemon.pipeline.scheduler import schedule_pass

LEASE = 60.0


def take(db: Database, owner: str, tiers: Sequence[str] = ("pfs",), **kw: Any) -> joblib.Claim | None:
    """``claim_next_copy_job`` with the test's lease."""
    return joblib.claim_next_copy_job(db, owner, tiers, lease_seconds=LEASE, **kw)


def _queue(db: Database, *steps: int, node: str = "") -> list[int]:
    ids = [add_checkpoint(db, step, node=node) for step in steps]
    schedule_pass(db, TIERS)
    return ids


def test_claim_takes_the_newest_and_holds_a_lease(db: Database) -> None:
    _, newest = _queue(db, 1, 2)
    now = utcnow()
    claim = take(db, "a:1", now=now)
    assert claim is not None
    assert claim.checkpoint_id == newest
    [job] = [j for j in jobs(db) if j.id == claim.job_id]
    assert (job.state, job.lease_owner) == ("running", "a:1")
    assert job.lease_expires_at == pytest.approx(now + timedelta(seconds=LEASE), abs=timedelta(seconds=1))


def test_claim_only_for_the_tiers_asked(db: Database) -> None:
    _queue(db, 1)
    assert take(db, "a:1", ["s3"]) is None
    assert take(db, "a:1", []) is None
    assert take(db, "a:1", ["pfs", "s3"]) is not None


def test_a_running_job_is_not_claimed_twice_until_its_lease_expires(db: Database) -> None:
    _queue(db, 1)
    now = utcnow()
    first = take(db, "a:1", now=now)
    assert first is not None
    assert take(db, "b:2", now=now + timedelta(seconds=30)) is None
    later = now + timedelta(seconds=LEASE + 1)
    second = take(db, "b:2", now=later)
    assert second is not None
    assert second.job_id == first.job_id
    # the old owner lost it: it can neither renew nor release
    assert not joblib.renew_lease(db, first.job_id, "a:1", lease_seconds=LEASE)
    assert not joblib.release_job(db, first.job_id, "a:1")
    assert jobs(db)[0].lease_owner == "b:2"


def test_renew_pushes_the_expiry(db: Database) -> None:
    _queue(db, 1)
    now = utcnow()
    claim = take(db, "a:1", now=now)
    assert claim is not None
    assert joblib.renew_lease(db, claim.job_id, "a:1", lease_seconds=LEASE, now=now + timedelta(seconds=50))
    # the lease would have expired at now+60 without the renewal
    assert take(db, "b:2", now=now + timedelta(seconds=70)) is None
    assert take(db, "b:2", now=now + timedelta(seconds=111)) is not None


def test_release_requeues_and_keeps_bytes_done(db: Database) -> None:
    [cid] = _queue(db, 1)
    claim = take(db, "a:1")
    assert claim is not None
    set_replica(db, cid, "pfs", ReplicaState.COPYING)
    assert joblib.release_job(db, claim.job_id, "a:1", bytes_done=1234)
    [job] = jobs(db)
    assert (job.state, job.lease_owner, job.lease_expires_at, job.attempts) == ("queued", None, None, 0)
    row = replica(db, cid, "pfs")
    assert (row.state, row.bytes_done) == ("pending", 1234)
    assert take(db, "a:1") is not None


def test_not_before_defers_a_job(db: Database) -> None:
    _queue(db, 1)
    now = utcnow()
    with db.session() as s:
        for job in s.scalars(select(Job)):
            job.not_before = now + timedelta(seconds=30)
    assert take(db, "a:1", now=now) is None
    assert take(db, "a:1", now=now + timedelta(seconds=31)) is not None


def test_start_up_requeues_jobs_of_an_earlier_process_on_this_node(db: Database) -> None:
    a, b, c = _queue(db, 1, 2, 3)
    for owner in ("node1:100", "node2:7", "node1:200"):
        claim = joblib.claim_next_copy_job(db, owner, ["pfs"], lease_seconds=LEASE)
        assert claim is not None
        set_replica(db, claim.checkpoint_id, "pfs", ReplicaState.COPYING)
    requeued = joblib.requeue_orphaned_jobs(db, "node1", "node1:200")
    by_owner = {j.lease_owner: j for j in jobs(db)}
    assert set(by_owner) == {None, "node2:7", "node1:200"}  # the dead node1:100 is back in the queue
    assert requeued == [by_owner[None].id]
    assert replica(db, by_owner[None].checkpoint_id, "pfs").state == "pending"
    assert replica(db, by_owner["node2:7"].checkpoint_id, "pfs").state == "copying"
    assert {a, b, c} == {j.checkpoint_id for j in jobs(db)}


def test_node_prefix_is_matched_literally(db: Database) -> None:
    _queue(db, 1)
    assert take(db, "node_1:5") is not None
    assert joblib.requeue_orphaned_jobs(db, "node%", "node%:1") == []
    assert joblib.requeue_orphaned_jobs(db, "nodeX1", "nodeX1:1") == []  # "_" is no wildcard


def test_hops_off_node_local_storage_stay_on_their_node(db: Database) -> None:
    add_checkpoint(db, 1, node="node2")
    schedule_pass(db, TIERS)
    mine: dict[str, Any] = {"node": "node1", "local_tier": "nvme"}
    assert take(db, "node1:1", **mine) is None
    cid = add_checkpoint(db, 2, ("deleted", "verified", "pending", "pending"), node="node2")
    schedule_pass(db, TIERS)
    claim = take(db, "node1:1", ["pfs", "s3"], **mine)
    assert claim is not None
    assert (claim.checkpoint_id, claim.dst_tier) == (cid, "s3")
    claim = take(db, "node2:1", node="node2", local_tier="nvme")
    assert claim is not None


def test_concurrent_claimers_never_share_a_job(db: Database) -> None:
    _queue(db, *range(1, 13))
    got: list[int] = []
    lock = threading.Lock()

    def worker(name: str) -> None:
        while (claim := joblib.claim_next_copy_job(db, name, ["pfs"], lease_seconds=LEASE)) is not None:
            with lock:
                got.append(claim.job_id)

    threads = [threading.Thread(target=worker, args=(f"w:{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == sorted(j.id for j in jobs(db))


def test_postgres_claim_skips_locked_rows(db: Database) -> None:
    if db.is_sqlite:
        pytest.skip("SQLite serialises writers; SKIP LOCKED is PostgreSQL's")
    _queue(db, 1, 2)
    with db.session() as other:  # another node's claim transaction, holding the newest row
        newest = other.scalars(
            select(Job).order_by(Job.priority.desc()).limit(1).with_for_update(skip_locked=True)
        ).one()
        claim = take(db, "a:1")
        assert claim is not None
        assert claim.job_id != newest.id


def test_leases_run_on_the_databases_clock_not_the_nodes(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL a node whose clock runs an hour fast neither takes a live lease nor sets
    one that outlives its real length; on SQLite (one node) the node's clock is the clock."""
    _queue(db, 1)
    first = take(db, "n1:1")
    assert first is not None
    with db.read_session() as s:
        real_now = dialect.lease_clock(s)
    skewed = real_now + timedelta(hours=1)
    monkeypatch.setattr(joblib, "utcnow", lambda: skewed)
    monkeypatch.setattr(dialect, "utcnow", lambda: skewed)
    stolen = joblib.claim_next_copy_job(db, "n2:1", ["pfs"], lease_seconds=60)
    if db.is_sqlite:
        assert stolen is not None, "on SQLite the node's clock is the lease clock"
        return
    assert stolen is None, "a node with a fast clock took a live lease"
    assert joblib.renew_lease(db, first.job_id, "n1:1", lease_seconds=60)
    with db.read_session() as s:
        expires = s.get(Job, first.job_id).lease_expires_at  # type: ignore[union-attr]
    assert expires is not None
    assert expires - real_now < timedelta(seconds=120), "the renewal used the node's skewed clock"


def test_owned_job_locks_the_job_row_first(db: Database) -> None:
    """Every change to a running job takes the job's row lock before a replica's: a takeover's
    start and the old owner's end then queue on the job instead of deadlocking (PostgreSQL)."""
    _queue(db, 1)
    claim = take(db, "n1:1")
    assert claim is not None
    seen: list[str] = []

    def capture(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", capture)
    try:
        with db.session() as s:
            assert joblib.owned_job(s, claim.job_id, "n1:1") is not None
            assert joblib.owned_job(s, claim.job_id, "n2:1") is None
    finally:
        event.remove(db.engine, "before_cursor_execute", capture)
    reads = [q for q in seen if "FROM jobs" in q]
    assert reads, seen
    assert all(("FOR UPDATE" in q) is not db.is_sqlite for q in reads)
