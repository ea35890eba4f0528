"""A RAM tier 0 end to end: two real daemons on one PostgreSQL, node0's tier 0 a real tmpfs with
``retention.release_once_copied``, tier 1 each node's own NVMe directory (``ssd``), a peer tier.

- a step written to node0's tmpfs ends verified on its NVMe and on node1 (safe against one
  node's loss), then goes from the tmpfs, the log saying why;
- with node1 dead (no live peer), the next step is verified on the NVMe but stays in RAM, the
  retention plan (``GET /v1/retention/plan``) saying what it waits for.

Slow (about 20 s here): two daemons and a few retention passes; both cases share them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.fixtures.fleet import RUN, Fleet, FleetSpec, Node, build_fleet
from tests.fixtures.pgserver import PostgresServer
from tests.fixtures.tmpfs import small_disk
from tests.integration.daemon_helpers import write_files
from tests.integration.fleet_jobs import dcp_metadata, shard_name

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("peer_ram")]
WAIT = 60.0
SHARD = 1024 * 1024
FAST_FLEET = {"heartbeat_interval": 0.5, "lease": 1, "node_timeout": 2}


def _ram_tier0(node: Node) -> None:
    """Node's config: tier 0 ``ram`` released once copied, tier 1 its own ``ssd``, fast passes."""
    config_path = node.root / "tierd.yaml"
    data = yaml.safe_load(config_path.read_text())
    ram = {**data["tiers"][0], "name": "ram", "delete_delay": 0, "retention": {"release_once_copied": True}}
    ssd = {"name": "ssd", "kind": "posix", "path": str(node.root / "ssd"), "shared": False}
    (node.root / "ssd").mkdir()
    data["tiers"] = [ram, *data["tiers"][1:], ssd]
    data["retention"] = {"interval": 0.5}
    data["fleet"] = {**data["fleet"], **FAST_FLEET}
    config_path.write_text(yaml.safe_dump(data))


@pytest.fixture(scope="module")
def ram_fleet(tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("ram-fleet")
    spec = FleetSpec(nodes=2, with_s3=False, with_pfs=False, peer={}, domains=2)
    fleet = build_fleet(root / "fleet", postgres_server.new_database(), spec)
    for node in fleet.nodes:
        _ram_tier0(node)
    with small_disk(fleet.nodes[0].tier0, 64 * 1024 * 1024):
        fleet.nodes[0].watch_dir.mkdir()
        try:
            fleet.start()
            fleet.wait_for(lambda: _all_live(fleet), WAIT, "both nodes live in node0's /v1/fleet")
            yield fleet
        finally:
            fleet.stop()


def _all_live(fleet: Fleet) -> bool:
    """Whether node0 sees every node heard from (so its first step has a peer to go to)."""
    view = fleet.nodes[0].get("/v1/fleet")
    return sum(not n["silent"] for n in view["nodes"]) == len(fleet.nodes)


def _write_step(node: Node, step: int) -> dict[str, bytes]:
    """A whole DCP step on ``node``: one rank's shard, then a real ``.metadata`` last."""
    directory = node.watch_dir / f"step_{step}"
    files = write_files(directory, {shard_name(0): SHARD}, seed=step)
    temp = directory / ".metadata.tmp"
    temp.write_bytes(dcp_metadata([SHARD]))
    temp.rename(directory / ".metadata")
    return files


def _detail(fleet: Fleet, step: int) -> dict[str, Any]:
    checkpoint = fleet.wait_for(lambda: fleet.checkpoints().get(step), WAIT, f"step {step} recorded")
    return fleet.checkpoint(checkpoint["id"])


def _states(detail: dict[str, Any]) -> dict[str, str]:
    return {r["tier"]: r["state"] for r in detail["replicas"]}


def _ram_item(node: Node, step: int) -> dict[str, Any] | None:
    plan = node.get("/v1/retention/plan", tier="ram")
    return next((i for i in plan["tiers"][0]["items"] if i["step"] == step), None)


def test_a_step_goes_from_ram_once_on_nvme_and_on_a_peer(ram_fleet: Fleet) -> None:
    node0 = ram_fleet.nodes[0]
    files = _write_step(node0, 1)
    step_dir = node0.watch_dir / "step_1"
    ram_fleet.wait_for(lambda: not step_dir.exists(), WAIT, "step 1 released from node0's tmpfs")
    detail = _detail(ram_fleet, 1)
    assert _states(detail)["ssd"] == "verified"
    assert _states(detail)["ram"] in ("deleting", "deleted")
    assert detail["node_loss"]["safe"] is True, detail["node_loss"]
    copies = [(c["node"], c["holder"], c["state"]) for c in detail["node_loss"]["peer_copies"]]
    assert copies == [("node0", "node1", "verified")]
    on_ssd = node0.root / "ssd" / RUN / "step_1" / shard_name(0)
    assert on_ssd.read_bytes() == files[shard_name(0)]
    held = [p for p in (ram_fleet.nodes[1].root / "peer" / "node0").rglob("*") if p.name == shard_name(0)]
    assert [p.read_bytes() for p in held] == [files[shard_name(0)]]
    deleted = [
        e for e in node0.daemon.events() if e.get("event") == "replica_deleted" and e.get("tier") == "ram"
    ]
    assert deleted, "no replica_deleted event for the RAM copy"
    assert (
        "release_once_copied: verified on tier ssd and safe against one node's loss since"
        in deleted[0]["reason"]
    )


def test_a_step_without_a_live_peer_stays_in_ram(ram_fleet: Fleet) -> None:
    node0, node1 = ram_fleet.nodes
    node1.kill()
    first = _detail(ram_fleet, 1)

    def written_off() -> bool:
        copies = ram_fleet.checkpoint(first["id"])["node_loss"]["peer_copies"]
        return any(c["holder"] == "node1" and c["state"] in ("failed", "deleted") for c in copies)

    ram_fleet.wait_for(written_off, WAIT, "node1's copy written off once it is no longer live")
    files = _write_step(node0, 2)

    def waiting() -> dict[str, Any] | None:
        item = _ram_item(node0, 2)
        on_ssd = _states(_detail(ram_fleet, 2)).get("ssd") == "verified"
        return item if on_ssd and item is not None and item["action"] == "keep" else None

    item = ram_fleet.wait_for(waiting, WAIT, "step 2 on the NVMe, kept in RAM by the plan")
    assert item["policy"] == "release_once_copied"
    assert (
        item["reason"]
        == "release_once_copied: kept until verified on tier ssd and safe against one node's loss"
    )
    assert _detail(ram_fleet, 2)["node_loss"]["safe"] is False
    assert (node0.watch_dir / "step_2" / shard_name(0)).read_bytes() == files[shard_name(0)]
