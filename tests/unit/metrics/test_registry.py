"""What one daemon's registry exports: no ``_created`` series, the process, counters from 0."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.world import World, posix_tier
from tests.unit.metrics.helpers import scrape
from tierd import __version__
from tierd.daemon.catalog.db import Database
from tierd.daemon.metrics import Metrics
from tierd.daemon.metrics.build import revision


def _metrics(tmp_path: Path, db: Database) -> Metrics:
    world = World.make(tmp_path, db, [posix_tier(tmp_path, "nvme"), posix_tier(tmp_path, "pfs")])
    return Metrics(db, world.config)


def test_no_created_series_and_the_process_is_there(tmp_path: Path, sqlite_db: Database) -> None:
    metrics = _metrics(tmp_path, sqlite_db)
    metrics.transfers.labels("pfs", "verified").inc()
    metrics.transfer_seconds.labels("pfs").observe(3)
    samples = scrape(metrics.registry)
    assert [name for name in samples if name.endswith("_created")] == []
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"):
        assert next(iter(samples[name].values())) > 0, name
    assert len(samples["python_info"]) == 1
    assert samples["tierd_build_info"] == {(("revision", revision()), ("version", __version__)): 1}


def test_every_counter_of_a_configured_tier_starts_at_zero(tmp_path: Path, sqlite_db: Database) -> None:
    """So ``increase()`` sees the first failure, and a dashboard shows 0 rather than nothing."""
    samples = scrape(_metrics(tmp_path, sqlite_db).registry)
    for tier in ("nvme", "pfs"):
        one = (("tier", tier),)
        assert samples["tierd_transfer_bytes_total"][one] == 0
        assert samples["tierd_scrub_mismatches_total"][one] == 0
        assert samples["tierd_evictions_total"][one] == 0
        assert samples["tierd_transfer_seconds_count"][one] == 0
        assert samples["tierd_transfer_failures_total"][(("reason", "retryable"), *one)] == 0
        assert samples["tierd_transfers_total"][(("result", "failed"), *one)] == 0
        assert samples["tierd_scrub_replicas_total"][(("result", "mismatch"), *one)] == 0
        assert samples["tierd_deletions_total"][(("reason", "eviction"), *one)] == 0
        assert samples["tierd_deletions_refused_total"][(("reason", "no_durable_copy"), *one)] == 0
    assert {labels[0][1] for labels in samples["tierd_transfer_failures_total"]} == {
        "no_space",
        "integrity",
        "permanent",
        "retryable",
    }
