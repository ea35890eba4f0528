"""The metrics' totals (``catalog.stats``), on SQLite and PostgreSQL."""

from __future__ import annotations

from tests.unit.catalog.helpers import BASE, add_checkpoint
from tierd.daemon.catalog import protection
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.stats import TierVerified, replica_stats


def test_an_empty_catalog_has_no_totals(db: Database) -> None:
    stats = replica_stats(db)
    assert (stats.counts, stats.verified) == ({}, [])


def test_counts_by_tier_and_state_and_the_newest_verified_per_tier(db: Database) -> None:
    add_checkpoint(db, 1, ("verified", "verified", "pending", "pending"))
    add_checkpoint(db, 2, ("verified", "copying", "pending", None))
    stats = replica_stats(db)
    assert stats.counts == {
        ("nvme", "verified"): 2,
        ("pfs", "verified"): 1,
        ("pfs", "copying"): 1,
        ("s3", "pending"): 2,
        ("dr", "pending"): 1,
    }
    by_tier = {v.tier: v for v in stats.verified}
    assert set(by_tier) == {"nvme", "pfs"}
    assert by_tier["nvme"] == TierVerified("nvme", BASE.replace(minute=2), 6)  # 3 bytes each
    assert by_tier["pfs"] == TierVerified("pfs", BASE.replace(minute=1), 3)


def test_pinned_and_held_checkpoints_are_counted(db: Database) -> None:
    first = add_checkpoint(db, 1)
    second = add_checkpoint(db, 2)
    add_checkpoint(db, 3)
    with db.session() as s:
        protection.pin(s, first, actor="alice", reason="golden", durable_tiers=[])
        protection.add_hold(s, first, name="a", reason="legal", actor="admin")
        protection.add_hold(s, second, name="a", reason="legal", actor="admin")
        protection.add_hold(s, second, name="b", reason="audit", actor="admin")
    stats = replica_stats(db)
    assert (stats.pinned, stats.held) == (1, 2)
