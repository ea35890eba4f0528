"""PostgreSQL stopped and started under the real daemon (a server of the test's own).

While it is gone ``/readyz`` answers 503 naming the catalog, a hop in flight goes on, and a
step written meanwhile is set aside; once it is back the daemon is ready again, records the
step (once), and every hop ends verified, run once: no job lost, none run twice.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.fixtures.postgres import PostgresServer
from tests.integration.daemon_helpers import MiB, all_jobs, audit, wait_for
from tests.integration.outage_helpers import (
    dcp_step,
    get,
    logged,
    no_tracebacks,
    replica,
    two_tier_daemon,
)
from tierd.daemon.catalog.db import Database


def _unready(base: str) -> str | None:
    answer = get(base, "/readyz")
    return str(answer.json()["detail"]) if answer.status_code == 503 else None


def _verified(base: str, step: int) -> bool:
    found = replica(base, step, "pfs")
    return found is not None and found["state"] == "verified"


@pytest.mark.slow
def test_the_daemon_rides_out_a_postgresql_restart(tmp_path: Path, private_postgres: PostgresServer) -> None:
    url = private_postgres.new_database()
    daemon, base = two_tier_daemon(tmp_path, url, pfs_rate=1 * MiB)
    try:
        daemon.start()
        daemon.wait_ready(30)
        first = dcp_step(tmp_path / "nvme" / "demo" / "step1", {f"s{i}.distcp": 1 * MiB for i in range(5)}, 1)
        wait_for(lambda: (found := replica(base, 1, "pfs")) and found["bytes_done"] > 0, 30, "step 1 copying")

        private_postgres.stop()
        detail = wait_for(lambda: _unready(base), 30, "/readyz to answer 503", interval=0.1)
        assert "catalog unreachable" in detail
        second = dcp_step(tmp_path / "nvme" / "demo" / "step2", {"t.distcp": 64 * 1024}, 2)
        wait_for(lambda: logged(daemon, "catalog_unavailable", service="detect"), 30, "detection to notice")
        wait_for(lambda: logged(daemon, "progress_not_saved"), 30, "the hop in flight to notice")
        private_postgres.start()

        daemon.wait_ready(30)
        wait_for(lambda: _verified(base, 1) and _verified(base, 2), 60, "both steps on pfs")
        assert daemon.terminate(30) == 0
    finally:
        daemon.stop()

    for step, data in ((1, first), (2, second)):
        copied = {p.name: p.read_bytes() for p in (tmp_path / "pfs" / "demo" / f"step{step}").iterdir()}
        assert copied == data
    db = Database(url)
    try:
        runs = sorted((j.checkpoint_id, j.state, j.attempts) for j in all_jobs(db))
        assert runs == [(1, "done", 0), (2, "done", 0)]
        actions = Counter((e.checkpoint_id, e.action) for e in audit(db))
        assert actions[(1, "detected")] == actions[(2, "detected")] == 1  # recorded once each
        assert actions[(1, "replica_verified")] == actions[(2, "replica_verified")] == 1
    finally:
        db.dispose()
    started = Counter(e["checkpoint"] for e in logged(daemon, "hop_started"))
    assert started == {1: 1, 2: 1}  # the hop in flight rode out the outage: no second run
    assert len(logged(daemon, "catalog_unavailable", service="detect")) == 1
    assert len(logged(daemon, "progress_not_saved")) == 1  # one line for the outage, not one per save
    assert logged(daemon, "progress_saved_again")
    assert logged(daemon, "catalog_available", service="detect")
    no_tracebacks(daemon)
