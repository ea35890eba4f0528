"""The usage report (``tierd.daemon.usage``): costs, savings and the 30-day projection, on SQLite."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.world import FileRow, ReplicaRow, record
from tierd.config import Config, PosixTier, TierRetention
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import AuditEvent
from tierd.daemon.catalog.usage import Stored
from tierd.daemon.usage import GIB, _Rate, project, usage_view

NOW = datetime(2026, 6, 1, tzinfo=UTC)
RATE = _Rate(steps_per_day=2.0, step_bytes=100.0, step_files=3.0, step_gap=100.0)


def test_a_tier_that_keeps_everything_grows_by_every_step() -> None:
    assert project(Stored(4, 12, 400), RATE, TierRetention()) == 400 + 60 * 100


@pytest.mark.parametrize(
    ("rules", "kept"),
    [
        ({"keep_last": 3}, 3),
        ({"keep_last": 3, "keep_best": {"metric": "loss", "n": 2, "mode": "min"}}, 5),
        ({"keep_within": "5d"}, 10),  # 2 a day for 5 days
        ({"keep_every_steps": 1000}, 0.1 * 64),  # a step every 100: one in ten of all 64 kept
        ({"keep_every_steps": 50}, 64),  # every step is a multiple of 50 or more apart: all kept
        ({"keep_last": 1000}, 64),  # never more than there are
    ],
)
def test_a_tier_with_rules_keeps_what_they_bound(rules: dict[str, Any], kept: float) -> None:
    projected = project(Stored(4, 12, 400), RATE, TierRetention(**rules))
    assert projected == round(400 + (kept - 4) * 100)


def test_the_newest_step_is_always_kept_and_bytes_never_go_below_zero() -> None:
    idle = _Rate(steps_per_day=0.0, step_bytes=100.0, step_files=1.0, step_gap=None)
    assert project(Stored(5, 5, 500), idle, TierRetention(keep_within=60)) == 100
    assert project(Stored(1, 1, 10), idle, TierRetention(keep_last=1)) == 10


def _config(tmp_path: Path, db: Database) -> Config:
    tiers = [
        {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme"), "retention": {"keep_last": 2}},
        {
            "name": "s3",
            "kind": "posix",
            "path": str(tmp_path / "s3"),
            "price_per_gb_month": "0.5",
            "price_per_1000_writes": "2",
            "price_per_1000_reads": "1",
            "scrub": {"every": "15d", "bandwidth": "1MB"},
        },
    ]
    return Config(tiers=tiers, catalog={"url": db.url})


def _step(db: Database, step: int, days_ago: float, states: tuple[str, str]) -> int:
    at = NOW - timedelta(days=days_ago)
    files = [FileRow(f"r/{step}/a", GIB // 2, "x"), FileRow(f"r/{step}/b", GIB // 2, "x")]
    replicas = [ReplicaRow(t, i, s, at) for i, (t, s) in enumerate(zip(("nvme", "s3"), states, strict=True))]
    return record(db, run="r", step=step, path=f"r/{step}", files=files, replicas=replicas, created_at=at)


def test_the_report_prices_what_each_tier_holds_saved_and_will_hold(
    tmp_path: Path, sqlite_db: Database
) -> None:
    """Run r saved 9 steps of 1 GiB (2 files) in 7 days; nvme keeps 2, s3 holds 7 and keeps all.

    s3: 7 GiB at 0.5 = 3.5 a month; 9/7 steps a day x 30 days x 2 files = 77 writes; the scrub
    reads 14 files twice a month = 28. Retention deleted one step from nvme 3 days ago.
    """
    ids = [_step(sqlite_db, step, days_ago=7 - step, states=("deleted", "verified")) for step in range(7)]
    _step(sqlite_db, 7, days_ago=0, states=("verified", "pending"))
    _step(sqlite_db, 8, days_ago=0.5, states=("verified", "pending"))
    with sqlite_db.session() as s:
        deleted = AuditEvent(
            at=NOW - timedelta(days=3),
            actor="retention",
            action="deleted",
            checkpoint_id=ids[3],
            tier="nvme",
            reason="retention: keep_last 2",
            detail={},
        )
        s.add(deleted)
    with sqlite_db.read_session() as s:
        view = usage_view(s, _config(tmp_path, sqlite_db), NOW, cadence_days=7, runs=10)
    nvme, s3 = view.tiers
    assert (s3.bytes, s3.files, s3.checkpoints) == (7 * GIB, 14, 7)
    assert s3.storage_cost_per_month == Decimal("3.5")
    assert s3.writes_per_month == round(9 / 7 * 30 * 2)  # 9 steps in 7 days, 2 files each
    assert s3.reads_per_month == 28
    assert s3.request_cost_per_month == Decimal(s3.writes_per_month) / 1000 * 2 + Decimal("0.028")
    assert s3.cost_per_month == Decimal("3.5") + s3.request_cost_per_month
    assert s3.projected_bytes == pytest.approx(7 * GIB + 9 / 7 * 30 * GIB, abs=1)
    assert (nvme.cost_per_month, nvme.storage_class) == (None, "default")
    assert (nvme.retention_deleted_checkpoints, nvme.retention_deleted_bytes) == (1, GIB)
    assert nvme.projected_bytes == 2 * GIB  # keep_last 2 of steps of 1 GiB
    assert view.totals.unpriced == ["nvme"]
    assert view.totals.cost_per_month == s3.cost_per_month
    assert [(c.storage_class, c.tiers, c.bytes) for c in view.storage_classes] == [
        ("default", ["nvme", "s3"], 9 * GIB)
    ]
    assert [(r.run, r.bytes, r.tiers) for r in view.runs] == [
        ("r", 9 * GIB, {"nvme": 2 * GIB, "s3": 7 * GIB})
    ]
    assert view.runs[0].steps_per_day == pytest.approx(9 / 7)
    assert view.runs_total == 1


class _ClassedTier(PosixTier):
    """A tier with the ``storage_class`` key the object-store tiers take (issue 28's other items)."""

    storage_class: str | None = None


def test_tiers_are_added_up_by_storage_class(tmp_path: Path, sqlite_db: Database) -> None:
    for step in range(2):
        _step(sqlite_db, step, days_ago=40, states=("verified", "verified"))
    config = _config(tmp_path, sqlite_db)
    nvme, s3 = config.tiers
    classed = _ClassedTier(**s3.model_dump(), storage_class="STANDARD_IA")
    config = config.model_copy(update={"tiers": [nvme, classed]})
    with sqlite_db.read_session() as s:
        view = usage_view(s, config, NOW, cadence_days=7, runs=10)
    assert [(c.storage_class, c.tiers, c.bytes, c.cost_per_month) for c in view.storage_classes] == [
        ("STANDARD_IA", ["s3"], 2 * GIB, Decimal("1.0")),
        ("default", ["nvme"], 2 * GIB, None),
    ]
    assert [t.storage_class for t in view.tiers] == ["default", "STANDARD_IA"]
    assert view.runs[0].steps_per_day is None  # nothing saved within the window
    assert [t.projected_bytes for t in view.tiers] == [2 * GIB, 2 * GIB]
