"""The usage report's aggregates (``catalog.usage``), on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from tests.fixtures.world import FileRow, ReplicaRow, record
from tierd.daemon.catalog import usage
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import AuditEvent
from tierd.daemon.catalog.usage import Cadence, Stored

NOW = datetime(2026, 6, 1, tzinfo=UTC)
SINCE = NOW - timedelta(days=7)


def _add(
    db: Database, run: str, step: int, sizes: Sequence[int], states: Sequence[str], *, days_ago: float
) -> int:
    at = NOW - timedelta(days=days_ago)
    return record(
        db,
        run=run,
        step=step,
        path=f"{run}/{step}",
        files=[FileRow(f"{run}/{step}/f{i}", size, "x") for i, size in enumerate(sizes)],
        replicas=[
            ReplicaRow(tier, i, state, at)
            for i, (tier, state) in enumerate(zip(("nvme", "s3"), states, strict=True))
        ],
        created_at=at,
    )


def _world(db: Database) -> dict[str, int]:
    return {
        "old": _add(db, "a", 10, [100, 100], ["deleted", "verified"], days_ago=20),
        "a20": _add(db, "a", 20, [300], ["verified", "verified"], days_ago=3),
        "a30": _add(db, "a", 30, [500], ["verified", "copying"], days_ago=1),
        "b1": _add(db, "b", 1, [7], ["verified", "pending"], days_ago=2),
        "c5": _add(db, "c", 5, [1000], ["deleted", "verified"], days_ago=40),
    }


def test_bytes_stored_count_verified_replicas_only(db: Database) -> None:
    _world(db)
    with db.read_session() as s:
        assert usage.stored_by_tier(s) == {"nvme": Stored(3, 3, 807), "s3": Stored(3, 4, 1500)}
        assert usage.run_count(s) == 3


def test_top_runs_are_the_biggest_over_every_tier(db: Database) -> None:
    _world(db)
    with db.read_session() as s:
        top = usage.top_runs(s, 2)
        assert top == {"a": {"nvme": 800, "s3": 500}, "c": {"s3": 1000}}
        assert list(top) == ["a", "c"]
        assert usage.top_runs(s, 5)["b"] == {"nvme": 7}


def test_cadence_counts_the_window_and_the_first_save_ever(db: Database) -> None:
    _world(db)
    with db.read_session() as s:
        found = sorted(usage.cadence(s, SINCE), key=lambda c: c.run)
    assert found == [
        Cadence("a", 2, 800, 2, 20, 30, NOW - timedelta(days=20)),
        Cadence("b", 1, 7, 1, 1, 1, NOW - timedelta(days=2)),
    ]


def test_per_tier_and_run_only_for_runs_that_saved_in_the_window(db: Database) -> None:
    _world(db)
    with db.read_session() as s:
        assert usage.stored_by_tier_and_run(s, SINCE) == {
            ("nvme", "a"): Stored(2, 2, 800),
            ("s3", "a"): Stored(2, 3, 500),
            ("nvme", "b"): Stored(1, 1, 7),
        }


def test_retention_deletions_of_the_window_from_the_audit_log(db: Database) -> None:
    ids = _world(db)

    def event(action: str, checkpoint: str, tier: str, reason: str, days_ago: float) -> AuditEvent:
        return AuditEvent(
            at=NOW - timedelta(days=days_ago),
            actor="retention",
            action=action,
            checkpoint_id=ids[checkpoint],
            tier=tier,
            reason=reason,
            detail={},
        )

    with db.session() as s:
        s.add_all(
            [
                event("deleted", "old", "nvme", "retention: keep_last 1", 5),
                event("deleted", "c5", "nvme", "retention: keep_last 1", 29),
                event("deleted", "c5", "s3", "api: gone", 2),  # an operator's, not retention's
                event("evicted", "a20", "nvme", "eviction: disk", 1),
                event("deleted", "a20", "s3", "retention: old", 31),  # before the window
                event("delete_requested", "a30", "nvme", "retention: x", 1),
            ]
        )
    with db.read_session() as s:
        assert usage.retention_deleted(s, NOW - timedelta(days=30)) == {"nvme": Stored(2, 3, 1200)}


def test_an_empty_catalog_reports_nothing(db: Database) -> None:
    with db.read_session() as s:
        assert usage.stored_by_tier(s) == {}
        assert usage.top_runs(s, 10) == {}
        assert usage.cadence(s, SINCE) == []
        assert usage.retention_deleted(s, SINCE) == {}
        assert usage.run_count(s) == 0
