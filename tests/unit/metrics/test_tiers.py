"""Each tier's space, pressure and scrub progress: read at scrape, from the daemon acting on the tier."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from sqlalchemy import update

from tests.fixtures.world import World, posix_tier
from tests.unit.metrics.helpers import scrape
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Replica, utcnow
from tierd.daemon.metrics import Metrics
from tierd.daemon.metrics.tiers import SpaceReader

GiB = 1024**3


def _world(tmp_path: Path, db: Database) -> World:
    return World.make(
        tmp_path,
        db,
        [
            posix_tier(tmp_path, "nvme", shared=False, free_space={"evict_below": "1%", "evict_to": "2%"}),
            posix_tier(tmp_path, "pfs", scrub={"every": "1h", "bandwidth": "1GB"}),
        ],
    )


def test_space_is_read_at_each_scrape_for_the_tiers_this_daemon_acts_on(
    tmp_path: Path, sqlite_db: Database
) -> None:
    world = _world(tmp_path, sqlite_db)
    leading = [False]
    metrics = Metrics(sqlite_db, world.config, acts_on=lambda tier: tier == "nvme" or leading[0])
    samples = scrape(metrics.registry)
    st = os.statvfs(tmp_path)
    nvme = (("tier", "nvme"),)
    assert samples["tierd_tier_size_bytes"] == {nvme: st.f_blocks * st.f_frsize}
    assert abs(samples["tierd_tier_free_bytes"][nvme] - st.f_bavail * st.f_frsize) < GiB
    assert samples["tierd_tier_used_bytes"][nvme] == (
        samples["tierd_tier_size_bytes"][nvme] - samples["tierd_tier_free_bytes"][nvme]
    )
    leading[0] = True  # the shared tier's space: the leader's to report
    assert set(scrape(metrics.registry)["tierd_tier_size_bytes"]) == {nvme, (("tier", "pfs"),)}


def test_a_tier_whose_root_is_gone_is_left_out(tmp_path: Path, sqlite_db: Database) -> None:
    world = _world(tmp_path, sqlite_db)
    (tmp_path / "pfs").rmdir()
    samples = scrape(Metrics(sqlite_db, world.config).registry)
    assert set(samples["tierd_tier_free_bytes"]) == {(("tier", "nvme"),)}


def test_a_hung_mount_is_left_out_and_skipped_until_its_call_returns(tmp_path: Path) -> None:
    hung, fine = tmp_path / "hung", tmp_path
    release = threading.Event()
    calls: list[Path] = []

    def stat(root: Path) -> os.statvfs_result:
        calls.append(root)
        if root == hung:
            release.wait(60)
        return os.statvfs(fine)

    reader = SpaceReader(timeout=1, stat=stat)  # the first read waits it out; ample for the fine one
    assert set(reader.read([hung, fine])) == {fine}
    assert reader.stuck() == {hung}
    assert set(reader.read([hung, fine])) == {fine}
    assert calls.count(hung) == 1  # not called again while its first call hangs
    release.set()
    deadline = time.monotonic() + 30
    while reader.stuck() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert set(reader.read([hung, fine])) == {hung, fine}


def test_pressure_is_reported_for_the_tiers_with_marks(tmp_path: Path, sqlite_db: Database) -> None:
    world = _world(tmp_path, sqlite_db)
    metrics = Metrics(sqlite_db, world.config)
    nvme = (("tier", "nvme"),)
    assert scrape(metrics.registry)["tierd_tier_pressure_blocked"] == {nvme: 0}
    metrics.tier_pressure("nvme", blocked=True)
    assert scrape(metrics.registry)["tierd_tier_pressure_blocked"] == {nvme: 1}
    metrics.tier_pressure("nvme", blocked=False)
    assert scrape(metrics.registry)["tierd_tier_pressure_blocked"] == {nvme: 0}


async def test_scrub_progress_counts_what_was_checked_within_every(tmp_path: Path, db: Database) -> None:
    world = _world(tmp_path, db)
    await world.add(1, on={"nvme": "verified", "pfs": "verified"})  # verified long ago, never checked
    checked = await world.add(2, on={"nvme": "verified", "pfs": "verified"})
    with db.session() as s:
        s.execute(
            update(Replica)
            .where(Replica.checkpoint_id == checked, Replica.tier == "pfs")
            .values(checked_at=utcnow())
        )
    samples = scrape(Metrics(db, world.config).registry)
    assert samples["tierd_scrub_pass_replicas"] == {
        (("state", "checked"), ("tier", "pfs")): 1,
        (("state", "unchecked"), ("tier", "pfs")): 1,
    }
    assert samples["tierd_scrub_oldest_check_age_seconds"][(("tier", "pfs"),)] > 3600
