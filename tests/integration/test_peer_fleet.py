"""Peer replication end to end: four real daemons on one PostgreSQL, each with its own tier 0, peer
directory and loopback address, failure domains 2 + 2 (node0, node1 in rack0; node2, node3 in
rack1), the parallel-FS hop held back (its directory missing). One fleet for the module, its steps in order:

- a real 4-process DCP save spread over the nodes: every part verified on a peer in the other
  rack, the step safe against one node's loss in ``GET /v1/checkpoints/{id}`` and ``tierd show``;
- node3's peer directory is a 2 MiB tmpfs: a larger part is refused (507, logged) and node2 takes it;
- node1 is reached through a proxy that flips a byte of the first body: refused (422), resent;
- node2 made to list the peer token with role ``read`` (a reload): 403, and the next peer;
- a peer killed (kill -9) while it takes a part: another takes it, and once it is back nothing
  of that part is left in its peer directory.

Each refusal is counted on its sender's ``/metrics``: ``tierd_peer_refusals_total{reason}``
(full, mismatch, forbidden, dead).

Slow (about 40 s here): four daemons and a spawned 4-rank gloo save; every case shares them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.faultproxy import Fault, FaultProxy, Rule
from tests.fixtures.fleet import ADMIN_TOKEN, RUN, Fleet, FleetSpec, Node, build_fleet
from tests.fixtures.pgserver import PostgresServer
from tests.fixtures.tmpfs import small_disk
from tests.integration.daemon_helpers import write_files
from tests.integration.fleet_jobs import dcp_metadata, dcp_save, shard_name
from tierd.daemon.backends.peer.choose import PeerNode, ring_order

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("peer_fleet")]
NODES = 4
WAIT = 60.0


@dataclass
class PeerFleet:
    fleet: Fleet
    proxy: FaultProxy  # in front of node1
    tmp: Path
    last_step: int = 1

    @property
    def nodes(self) -> list[Node]:
        return self.fleet.nodes

    def step_with(self, sender: int, first: int) -> int:
        """The next step whose ring sends ``sender``'s part to node ``first`` before any other."""
        peers = [PeerNode(f"node{i}", "", f"rack{i * 2 // NODES}") for i in range(NODES)]
        for step in range(self.last_step + 1, self.last_step + 1000):
            if ring_order(f"{RUN}/{step}", peers[sender], peers)[0].name == f"node{first}":
                self.last_step = step
                return step
        raise AssertionError("no such step")

    def checkpoint(self, step: int) -> dict[str, Any]:
        return self.fleet.wait_for(lambda: self.fleet.checkpoints().get(step), WAIT, f"step {step} recorded")

    def copies(self, step: int) -> list[dict[str, Any]]:
        detail = self.fleet.checkpoint(self.checkpoint(step)["id"])
        copies: list[dict[str, Any]] = detail["node_loss"]["peer_copies"]
        return copies

    def verified_at(self, step: int, node: str) -> str:
        """The holder of ``node``'s verified copy of ``step``, once there is one."""

        def holder() -> str | None:
            found = [c["holder"] for c in self.copies(step) if c["node"] == node and c["state"] == "verified"]
            return found[0] if found else None

        return self.fleet.wait_for(holder, WAIT, f"{node}'s part of step {step} verified on a peer")

    def refused(self, sender: Node, reason: str) -> float:
        """``tierd_peer_refusals_total{reason}`` on the sender's ``/metrics``."""
        text = httpx.get(f"{sender.url}/metrics", timeout=10).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "tierd_peer_refusals_total" and sample.labels == {"reason": reason}:
                    return sample.value
        raise AssertionError(f"{sender.name}: no tierd_peer_refusals_total{{reason={reason!r}}}")

    def refusals(self, sender: Node, status: int) -> list[str]:
        return [
            e["peer"]
            for e in sender.daemon.events()
            if e.get("event") == "peer_refused" and e.get("status") == status
        ]


def _whole_step(node: Node, step: int, shard_bytes: int) -> None:
    """A whole DCP step on ``node`` alone: one rank's shard, then a real ``.metadata`` last."""
    directory = node.watch_dir / f"step_{step}"
    write_files(directory, {shard_name(0): shard_bytes}, seed=step)
    temp = directory / ".metadata.tmp"
    temp.write_bytes(dcp_metadata([shard_bytes]))
    temp.rename(directory / ".metadata")


def _set_peer_role(node: Node, role: str) -> None:
    """Rewrite the node's peer token's role and reload it (SIGHUP); wait until it applied."""
    config_path = node.root / "tierd.yaml"
    data = yaml.safe_load(config_path.read_text())
    data["api"]["tokens"][0]["role"] = role
    config_path.write_text(yaml.safe_dump(data))
    before = len([e for e in node.daemon.events() if e.get("event") == "config_reloaded"])
    os.kill(node.pid, signal.SIGHUP)
    deadline = time.monotonic() + WAIT
    while len([e for e in node.daemon.events() if e.get("event") == "config_reloaded"]) <= before:
        assert time.monotonic() < deadline, "the reload was not applied"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def peers(tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer) -> Iterator[PeerFleet]:
    root = tmp_path_factory.mktemp("peer-fleet")
    spec = FleetSpec(
        nodes=NODES,
        with_s3=False,
        watch={"nodes": NODES},  # a node records its shards before the coordinator's .metadata lands
        peer={"bandwidth_limit": "4MB"},
        domains=2,
    )
    fleet = build_fleet(root / "fleet", postgres_server.new_database(), spec)
    fleet.pfs.rmdir()  # the PFS hop held back (its root missing: retried): only peers make a step safe
    with small_disk(fleet.nodes[3].root / "peer", 2 * 1024 * 1024):
        node1 = fleet.nodes[1]
        with FaultProxy(node1.url) as proxy:
            config_path = node1.root / "tierd.yaml"
            data = yaml.safe_load(config_path.read_text())
            data["fleet"]["advertise_url"] = proxy.endpoint_url
            config_path.write_text(yaml.safe_dump(data))
            try:
                fleet.start()
                yield PeerFleet(fleet, proxy, root)
            finally:
                fleet.stop()


def test_a_dcp_save_over_four_nodes_is_safe_against_one_node_loss(peers: PeerFleet) -> None:
    fleet = peers.fleet
    dcp_save(peers.tmp / "init", [n.watch_dir for n in peers.nodes], step=1)
    for index in range(NODES):
        holder = peers.verified_at(1, f"node{index}")
        assert int(holder.removeprefix("node")) * 2 // NODES != index * 2 // NODES, (index, holder)
    checkpoint = peers.checkpoint(1)
    detail = fleet.checkpoint(checkpoint["id"])
    assert detail["node_loss"]["safe"] is True, detail["node_loss"]
    assert {r["tier"]: r["state"] for r in detail["replicas"]}.get("pfs") != "verified"
    node = peers.nodes[0]
    shown = subprocess.run(
        [sys.executable, "-m", "tierd", "show", str(checkpoint["id"])],
        env={**os.environ, "TIERD_URL": node.url, "TIERD_TOKEN": ADMIN_TOKEN},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "node loss" in shown.stdout, shown.stdout
    assert "safe since" in shown.stdout, shown.stdout


def test_a_full_peer_refuses_visibly_and_another_takes_the_part(peers: PeerFleet) -> None:
    step = peers.step_with(sender=0, first=3)
    _whole_step(peers.nodes[0], step, 3 * 1024 * 1024)  # more than node3's 2 MiB tmpfs holds
    assert peers.verified_at(step, "node0") == "node2"
    assert "node3" in peers.refusals(peers.nodes[0], 507)
    assert peers.refused(peers.nodes[0], "full") >= 1
    failed = [c for c in peers.copies(step) if c["holder"] == "node3"]
    assert [c["state"] for c in failed] in (["failed"], ["deleted"])


def test_a_byte_changed_in_flight_is_refused_and_sent_again(peers: PeerFleet) -> None:
    step = peers.step_with(sender=2, first=1)
    peers.proxy.set_rules([Rule(Fault("corrupt_request"), method="PUT", nth=1)])
    try:
        _whole_step(peers.nodes[2], step, 256 * 1024)
        assert peers.verified_at(step, "node2") == "node1"
    finally:
        peers.proxy.set_rules([])
    assert "node1" in peers.refusals(peers.nodes[2], 422)
    assert peers.refused(peers.nodes[2], "mismatch") >= 1


def test_a_peer_refusing_the_token_is_passed_over(peers: PeerFleet) -> None:
    _set_peer_role(peers.nodes[2], "read")
    try:
        step = peers.step_with(sender=0, first=2)
        _whole_step(peers.nodes[0], step, 64 * 1024)
        assert peers.verified_at(step, "node0") == "node3"
    finally:
        _set_peer_role(peers.nodes[2], "peer")
    assert "node2" in peers.refusals(peers.nodes[0], 403)
    assert peers.refused(peers.nodes[0], "forbidden") >= 1


def test_a_peer_killed_mid_transfer_leaves_nothing_and_another_takes_the_part(peers: PeerFleet) -> None:
    fleet, sender, victim = peers.fleet, peers.nodes[3], peers.nodes[0]
    step = peers.step_with(sender=3, first=0)
    _whole_step(sender, step, 12 * 1024 * 1024)  # 3 s at the peer tier's 4 MB/s

    def copying() -> bool:
        return any(c["holder"] == "node0" and c["state"] == "copying" for c in peers.copies(step))

    fleet.wait_for(copying, WAIT, "node3's part on its way to node0", 0.05)
    dead_before = peers.refused(sender, "dead")
    victim.kill()
    assert peers.verified_at(step, "node3") == "node1"
    assert peers.refused(sender, "dead") > dead_before
    fleet.restart(victim)
    checkpoint_id = peers.checkpoint(step)["id"]
    part = victim.root / "peer" / "node3" / str(checkpoint_id)

    def nothing_left() -> bool:
        try:
            return not any(p.is_file() for p in part.rglob("*"))
        except FileNotFoundError:  # the restarted daemon removes the tree while we walk it
            return not part.exists()

    fleet.wait_for(nothing_left, WAIT, "node3's unfinished part gone from node0's peer directory")
    assert not [p for p in (victim.root / "peer").rglob("*tierd-tmp*")]


def test_copies_are_dropped_once_the_parallel_fs_has_each_step(peers: PeerFleet) -> None:
    fleet = peers.fleet
    fleet.pfs.mkdir()  # the PFS hop goes through at its next try: now, not after its backoff
    with psycopg.connect(fleet.db_url.replace("postgresql+psycopg", "postgresql")) as conn:
        conn.execute("UPDATE jobs SET not_before = NULL WHERE state = 'queued'")

    def all_dropped() -> bool:
        steps = fleet.checkpoints()
        copies = [c for s in steps.values() for c in fleet.checkpoint(s["id"])["node_loss"]["peer_copies"]]
        held = [p for n in peers.nodes for p in (n.root / "peer").rglob("*") if p.is_file()]
        return all(c["state"] == "deleted" for c in copies) and not held

    fleet.wait_for(all_dropped, 120, "every peer copy dropped once the PFS holds its step", 0.5)
    reasons = {e["reason"] for _, e in fleet.events("peer_copy_dropped")}
    assert {"durable", "failed"} <= reasons
