"""Two real daemons on one PostgreSQL: the catalog-wide series come from the leader alone.

Each daemon exports its own view (catalog reachability, leadership, its node-local tier's
space, its counters); the catalog's totals (replicas, recovery point, jobs, waiting steps,
fleet nodes) and the shared tier's space come from the leader only, so ``sum()`` over the
fleet counts them once. When the leader stops, the other daemon takes over exporting them.
About 6 s of its own (two daemons start, one copy, a hand-over of the lease), on the
session's PostgreSQL.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures import http
from tests.fixtures.fleet import RUN, Fleet, FleetSpec, Node, start_fleet
from tests.fixtures.postgres import PostgresServer
from tests.integration.daemon_helpers import write_files

pytestmark = pytest.mark.slow

#: A lease short enough that the survivor leads within a second or two of the leader's stop.
FLEET = {"heartbeat_interval": 0.5, "lease": 2, "node_timeout": 2}
FLEETWIDE = {
    "tierd_replicas",
    "tierd_recovery_point_age_seconds",
    "tierd_verified_bytes",
    "tierd_checkpoints_pinned",
    "tierd_checkpoints_held",
    "tierd_jobs",
    "tierd_checkpoints_waiting",
    "tierd_oldest_waiting_checkpoint_age_seconds",
    "tierd_fleet_nodes",
}

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(node: Node) -> Samples:
    out: Samples = {}
    text = http.get(f"{node.url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def tiers_with_space(samples: Samples) -> set[str]:
    return {dict(labels)["tier"] for labels in samples.get("tierd_tier_free_bytes", {})}


@pytest.fixture
def fleet(tmp_path: Path, postgres_server: PostgresServer) -> Iterator[Fleet]:
    spec = FleetSpec(nodes=2, with_s3=False, config={"fleet": FLEET})
    with start_fleet(tmp_path / "fleet", postgres_server.new_database(), spec) as started:
        yield started


def save_step(node: Node, step: int) -> None:
    """A step written on ``node``'s tier 0 a minute ago, announced as a training job does."""
    folder = node.watch_dir / f"step{step}"
    write_files(folder, {"__0_0.distcp": 8192, ".metadata": 100}, seed=step)
    saved = time.time() - 60
    for path in folder.iterdir():
        os.utime(path, (saved, saved))
    node.post("/v1/checkpoints", {"run": RUN, "step": step, "path": f"{RUN}/step{step}", "format": "dcp"})


def verified_on_pfs(fleet: Fleet) -> bool:
    steps = fleet.checkpoints()
    return 1 in steps and any(r["tier"] == "pfs" and r["state"] == "verified" for r in steps[1]["replicas"])


def test_only_the_leader_exports_the_catalogs_totals_and_the_other_takes_over(fleet: Fleet) -> None:
    [leader] = fleet.wait_for(lambda: fleet.leaders() if len(fleet.leaders()) == 1 else None, 30, "a leader")
    [other] = [n for n in fleet.nodes if n is not leader]
    save_step(other, 1)
    fleet.wait_for(lambda: verified_on_pfs(fleet), 30, "step 1 verified on pfs")
    led, follower = scrape(leader), scrape(other)
    assert set(led) >= FLEETWIDE
    assert FLEETWIDE.isdisjoint(follower)
    verified = (("state", "verified"), ("tier", "pfs"))
    assert sum(s.get("tierd_replicas", {}).get(verified, 0) for s in (led, follower)) == 1  # counted once
    assert follower["tierd_transfers_total"][(("result", "verified"), ("tier", "pfs"))] == 1  # its own copy
    for samples in (led, follower):
        assert samples["tierd_catalog_up"] == {(): 1}
        assert samples["tierd_transfers_total"][(("result", "failed"), ("tier", "pfs"))] == 0
    assert led["tierd_fleet_leader"] == {(): 1}
    assert follower["tierd_fleet_leader"] == {(): 0}
    assert led["tierd_fleet_nodes"][(("state", "live"),)] == 2
    # Each node's own tier 0 from each node; the shared pfs from the leader alone.
    assert tiers_with_space(led) == {"nvme", "pfs"}
    assert tiers_with_space(follower) == {"nvme"}

    assert leader.daemon.terminate(30) == 0  # an orderly stop hands the lease over
    fleet.wait_for(lambda: other.leads(), 30, f"{other.name} to lead")
    taken = scrape(other)
    assert set(taken) >= FLEETWIDE
    assert tiers_with_space(taken) == {"nvme", "pfs"}
