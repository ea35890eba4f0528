"""The real daemon over disks that fill: a POSIX tier and a SQLite catalog, each on a small tmpfs.

A full tier fails its hop with "No space left on device" (counted by reason on
``/metrics``), leaves no temporary file, keeps detecting on tier 0, and completes the copy
once the file system has room. A full catalog disk logs one clear error (no traceback), the
daemon keeps running, ``PRAGMA integrity_check`` stays ``ok``, and the step written meanwhile
is recorded and copied once space returns.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.tmpfs import small_disk
from tests.integration.daemon_helpers import MiB, wait_for
from tests.integration.outage_helpers import (
    checkpoint,
    dcp_step,
    get,
    logged,
    no_tracebacks,
    replica,
    two_tier_daemon,
)
from tierd.daemon.backends.posix.temp import is_temp_name


@pytest.fixture
def running(tmp_path: Path) -> Iterator[list[Daemon]]:
    """Daemons a test starts, killed at teardown if still alive (before any tmpfs goes)."""
    started: list[Daemon] = []
    yield started
    for daemon in started:
        daemon.stop()


@pytest.mark.slow
def test_a_full_tier_fails_the_hop_and_copies_once_space_returns(
    tmp_path: Path, running: list[Daemon]
) -> None:
    with small_disk(tmp_path / "pfs", 2 * MiB) as pfs:
        daemon, base = two_tier_daemon(tmp_path)
        running.append(daemon)
        daemon.start()
        daemon.wait_ready(30)
        big = dcp_step(tmp_path / "nvme" / "demo" / "step1", {"a.distcp": 3 * MiB // 2, "b.distcp": MiB}, 1)

        failed = wait_for(
            lambda: (r := replica(base, 1, "pfs")) and r["state"] == "failed" and r, 120, "the hop to fail"
        )
        assert "No space left on device" in failed["error"]
        metrics = get(base, "/metrics").text
        assert 'tierd_transfer_failures_total{reason="no_space",tier="pfs"}' in metrics
        # The hop is recorded failed when its first file fails; a sibling file still being
        # written discards its temporary file as it unwinds, a moment later on a busy machine.
        wait_for(lambda: not [p for p in pfs.path.rglob("*") if is_temp_name(p.name)], 30, "temp files gone")
        assert not (pfs.path / "demo" / "step1" / ".metadata").exists()
        # Detection on tier 0 goes on while the tier is full; the small step fits and is copied.
        dcp_step(tmp_path / "nvme" / "demo" / "step2", {"c.distcp": 4096}, 2)
        wait_for(lambda: (r := replica(base, 2, "pfs")) and r["state"] == "verified", 60, "step 2 on pfs")

        pfs.resize(16 * MiB)
        # The job's backoff after a first failure is at most 30 s, plus a 10 s scheduling poll.
        wait_for(lambda: (r := replica(base, 1, "pfs")) and r["state"] == "verified", 90, "step 1 on pfs")
        copied = {p.name: p.read_bytes() for p in (pfs.path / "demo" / "step1").iterdir()}
        assert copied == big
        assert daemon.terminate(30) == 0
    no_tracebacks(daemon)


def _integrity(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


@pytest.mark.slow
def test_a_full_catalog_disk_logs_one_clear_error_and_loses_nothing(
    tmp_path: Path, running: list[Daemon]
) -> None:
    with small_disk(tmp_path / "catalog", 4 * MiB) as disk:
        catalog = disk.path / "catalog.db"
        daemon, base = two_tier_daemon(tmp_path, f"sqlite:///{catalog}")
        running.append(daemon)
        daemon.start()
        daemon.wait_ready(30)
        filler = disk.fill()
        data = dcp_step(tmp_path / "nvme" / "demo" / "step1", {f"s{i}.distcp": 2048 for i in range(50)}, 1)

        [error] = wait_for(
            lambda: logged(daemon, "catalog_unavailable", service="detect"), 30, "the catalog error"
        )
        assert error["level"] == "error"
        assert "database or disk is full" in error["error"]
        assert "INSERT" not in error["error"]  # the driver's words, not the SQL
        wait_for(lambda: logged(daemon, "catalog_retry"), 30, "a retry while the disk is full")
        answer = get(base, "/readyz")  # it answers pings: ready, with a warning that says why
        assert answer.status_code == 200
        detect = [w for w in answer.json()["warnings"] if w.startswith("detect: catalog failing for ")]
        assert detect
        assert detect[0].endswith("database or disk is full")
        assert daemon.alive()
        assert checkpoint(base, 1) is None
        assert _integrity(catalog) == "ok"

        filler.unlink()
        wait_for(lambda: (r := replica(base, 1, "pfs")) and r["state"] == "verified", 60, "step 1 on pfs")
        assert logged(daemon, "catalog_available", service="detect")
        assert len(logged(daemon, "catalog_unavailable", service="detect")) == 1
        assert get(base, "/readyz").json()["warnings"] == []
        assert daemon.terminate(30) == 0
        assert _integrity(catalog) == "ok"
    copied = {p.name: p.read_bytes() for p in (tmp_path / "pfs" / "demo" / "step1").iterdir()}
    assert copied == data
    no_tracebacks(daemon)
