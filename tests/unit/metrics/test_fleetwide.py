"""The catalog-wide gauges: the leader's alone, read at each scrape (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from sqlalchemy import update

from tests.fixtures.world import World, posix_tier
from tests.unit.metrics.helpers import scrape
from tierd.daemon.catalog import protection
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, Job, utcnow
from tierd.daemon.metrics import Metrics

#: What only the leader exports: the catalog's totals, the same whichever daemon reads them.
FLEETWIDE = {
    "tierd_replicas",
    "tierd_recovery_point_age_seconds",
    "tierd_node_loss_recovery_point_age_seconds",
    "tierd_verified_bytes",
    "tierd_checkpoints_pinned",
    "tierd_checkpoints_held",
    "tierd_jobs",
    "tierd_checkpoints_waiting",
    "tierd_oldest_waiting_checkpoint_age_seconds",
}


async def _world(tmp_path: Path, db: Database) -> World:
    world = World.make(tmp_path, db, [posix_tier(tmp_path, "nvme"), posix_tier(tmp_path, "pfs")])
    done = await world.add(1, on={"nvme": "verified", "pfs": "verified"})
    copying = await world.add(2, on={"nvme": "verified", "pfs": "pending"})
    waiting = await world.add(3, on={"nvme": "pending"}, state="waiting")
    with db.session() as s:
        s.execute(
            update(Checkpoint)
            .where(Checkpoint.id == waiting)
            .values(waiting_since=utcnow() - timedelta(minutes=10))
        )
        s.add(Job(kind="copy", checkpoint_id=copying, src_tier="nvme", dst_tier="pfs"))
        protection.pin(s, done, actor="test", reason="keep", durable_tiers=["pfs"])
    return world


async def test_the_leader_exports_the_catalogs_totals(tmp_path: Path, db: Database) -> None:
    world = await _world(tmp_path, db)
    samples = scrape(Metrics(db, world.config, leads=lambda: True).registry)
    assert set(samples) >= FLEETWIDE
    assert samples["tierd_catalog_up"] == {(): 1}
    replicas = samples["tierd_replicas"]
    assert replicas[(("state", "verified"), ("tier", "nvme"))] == 2
    assert replicas[(("state", "pending"), ("tier", "pfs"))] == 1
    assert replicas[(("state", "failed"), ("tier", "pfs"))] == 0
    assert set(samples["tierd_recovery_point_age_seconds"]) == {(("tier", "nvme"),), (("tier", "pfs"),)}
    assert set(samples["tierd_node_loss_recovery_point_age_seconds"]) == {()}  # step 1, on pfs
    assert samples["tierd_checkpoints_pinned"] == {(): 1}
    assert samples["tierd_jobs"] == {
        (("kind", "copy"), ("state", "queued"), ("tier", "pfs")): 1,
        (("kind", "copy"), ("state", "running"), ("tier", "pfs")): 0,
    }
    assert samples["tierd_checkpoints_waiting"] == {(): 1}
    assert samples["tierd_oldest_waiting_checkpoint_age_seconds"][()] >= 600


async def test_another_daemon_exports_only_its_own_view_of_the_catalog(tmp_path: Path, db: Database) -> None:
    world = await _world(tmp_path, db)
    leading = [False]
    metrics = Metrics(db, world.config, leads=lambda: leading[0])
    samples = scrape(metrics.registry)
    assert samples["tierd_catalog_up"] == {(): 1}
    assert FLEETWIDE.isdisjoint(samples)
    leading[0] = True  # asked at each scrape: a daemon that becomes the leader exports them next time
    assert set(scrape(metrics.registry)) >= FLEETWIDE


def test_a_catalog_that_cannot_be_read_is_down_and_nothing_else_is_said(tmp_path: Path) -> None:
    world = World.make(tmp_path, Database(f"sqlite:///{tmp_path / 'x.db'}"), [posix_tier(tmp_path, "nvme")])
    unmigrated = Database(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        samples = scrape(Metrics(unmigrated, world.config, leads=lambda: True).registry)
    finally:
        unmigrated.dispose()
    assert samples["tierd_catalog_up"] == {(): 0}
    assert FLEETWIDE.isdisjoint(samples)


async def test_each_priced_tier_exports_what_its_stored_bytes_cost_a_month(
    tmp_path: Path, db: Database
) -> None:
    """1 GiB and 2 GiB verified (as the catalog records them) at 0.5 per GiB-month; nvme is not priced."""
    tiers = [posix_tier(tmp_path, "nvme"), posix_tier(tmp_path, "pfs", price_per_gb_month="0.5")]
    world = World.make(tmp_path, db, tiers)
    first = await world.add(1, on={"nvme": "verified", "pfs": "verified"})
    second = await world.add(2, on={"nvme": "verified", "pfs": "verified"})
    with db.session() as s:
        s.execute(update(Checkpoint).where(Checkpoint.id == first).values(total_bytes=1 << 30))
        s.execute(update(Checkpoint).where(Checkpoint.id == second).values(total_bytes=1 << 31))
    samples = scrape(Metrics(db, world.config, leads=lambda: True).registry)
    assert samples["tierd_verified_bytes"][(("tier", "pfs"),)] == 3 * (1 << 30)
    assert samples["tierd_tier_storage_cost_per_month"] == {
        (("storage_class", "default"), ("tier", "pfs")): 1.5
    }
    follower = scrape(Metrics(db, world.config, leads=lambda: False).registry)
    assert "tierd_tier_storage_cost_per_month" not in follower
