"""Restore from a peer, end to end: three daemons on one PostgreSQL, each with its own tier 0 and
peer directory on its own loopback address, a real 3-rank DCP save spread over them, the PFS hop
held back (its directory is not mounted: it never gets the step). Each node's part is copied to
both other nodes by the real transport (``PeerClient``, as the sending service does, then
``mark_peer_copy``). Node 2 is killed with SIGKILL, its tier 0 wiped, and a fresh daemon started
for it: every rank's ``Client.ensure_local`` restores its shards (node 2's from its peers) byte
for byte, and ``dcp.load`` on every rank gives what was saved. A byte flipped in the nearest
holder's copy sends the restore to the other holder, and that copy is marked failed. ``tierd
restore --to-tier0 --node node2`` puts back node 2's part on its tier 0, and nothing else.

One fleet for the module. It needs more than 5 s: the 3-rank save spawns three processes that
import torch (~45 s of CPU in all with the daemons, on a loaded 2-core machine up to minutes of
wall time); the restores themselves take about a second each.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.fixtures.fleet import RUN, Fleet, FleetSpec, Node, build_fleet
from tests.fixtures.net import free_port
from tests.fixtures.pgserver import PostgresServer
from tests.integration.fleet_jobs import SHARD_FLOATS, dcp_save, shard_name
from tierd.client import Client
from tierd.daemon.backends.base import BytesReader, RangeReader
from tierd.daemon.backends.budget import MIB, ByteBudget
from tierd.daemon.backends.peer.choose import PeerNode, choose_peers
from tierd.daemon.backends.peer.client import PeerClient, PeerFile
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Part, ReplicaState
from tierd.daemon.catalog.peer_copies import mark_peer_copy

pytestmark = [pytest.mark.slow]

PEER_TOKEN = "peer-secret-0123456789"
OPS_TOKEN = "ops-secret-0123456789"
OPS = {"Authorization": f"Bearer {OPS_TOKEN}"}
DOMAINS = ("rackA", "rackB", "rackA")  # node 2 shares its rack with node 0: node 0's copy is nearest
STEP = 1


@dataclass
class World:
    fleet: Fleet
    checkpoint_id: int
    saved: dict[str, bytes]  # file name -> the bytes the save wrote
    parts: dict[str, list[str]]  # node -> the names of its part


def _api(node: Node, method: str, path: str, **kwargs: Any) -> Any:
    answer = httpx.request(method, node.url + path, headers=OPS, timeout=15, **kwargs)
    assert answer.status_code < 300, f"{node.name} {method} {path}: {answer.status_code} {answer.text}"
    return answer.json()


def _configure(fleet: Fleet) -> None:
    """Each node on its own 127.0.0.x with tokens, an advertised URL, a rack and a peer directory."""
    for node in fleet.nodes:
        path = node.daemon.config_path
        data = yaml.safe_load(path.read_text())
        listen = f"127.0.0.{11 + node.index}:{free_port()}"
        token_file = node.root / "peer.token"
        token_file.write_text(PEER_TOKEN)
        token_file.chmod(0o600)
        data["api"] = {
            "listen": listen,
            "tokens": [
                {"name": "peers", "token": PEER_TOKEN, "role": "peer"},
                {"name": "ops", "token": OPS_TOKEN, "role": "admin"},
            ],
        }
        data["fleet"] = {"advertise_url": f"http://{listen}", "failure_domain": DOMAINS[node.index]}
        peer = {"name": "peers", "kind": "peer", "path": str(node.root / "peer"), "replicas": 2}
        data["tiers"].insert(1, {**peer, "token_file": str(token_file)})
        path.write_text(yaml.safe_dump(data))
        node.url = f"http://{listen}"


def _complete(fleet: Fleet) -> dict[str, Any] | None:
    page = _api(fleet.nodes[0], "GET", "/v1/checkpoints", params={"run": RUN})
    found = [c for c in page["items"] if c["step"] == STEP and c["state"] == "complete"]
    return found[0] if found else None


async def _send_parts(fleet: Fleet, world: World, checksums: dict[str, str]) -> None:
    """Each node's part to the two peers ``choose_peers`` names, over HTTP; recorded as verified."""
    nodes = [PeerNode(n.name, n.url, DOMAINS[n.index]) for n in fleet.nodes]
    sender = PeerClient(PEER_TOKEN, ByteBudget(8 * MIB))
    held: dict[str, list[str]] = {}
    try:
        for me in nodes:
            peers = choose_peers(str(world.checkpoint_id), me, nodes, 2)
            for name in world.parts[me.name]:
                relpath = f"{RUN}/step_{STEP}/{name}"
                data = world.saved[name]

                async def reader(data: bytes = data) -> RangeReader:
                    return BytesReader(data)

                file = PeerFile(me.name, world.checkpoint_id, relpath, checksums[relpath])
                took = await sender.replicate(peers, 2, file, reader)
                assert [p.name for p in took] == [p.name for p in peers]
            held[me.name] = [p.name for p in peers]
    finally:
        await sender.close()
    database = Database(fleet.db_url)
    with database.session() as session:
        for part in session.query(Part).filter(Part.checkpoint_id == world.checkpoint_id):
            for holder in held[part.node]:
                mark_peer_copy(session, part.id, holder, ReplicaState.VERIFIED)
    database.engine.dispose()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer) -> Iterator[World]:
    root = tmp_path_factory.mktemp("peer-restore")
    spec = FleetSpec(
        nodes=3,
        watch={"nodes": 3},
        with_s3=False,
        pfs={"path": str(root / "pfs-not-mounted")},  # the PFS hop never gets the step
    )
    fleet = build_fleet(root / "fleet", postgres_server.new_database(), spec)
    _configure(fleet)
    try:
        fleet.start()
        dcp_save(root / "init", [n.watch_dir for n in fleet.nodes], step=STEP)
        checkpoint = fleet.wait_for(lambda: _complete(fleet), 90, "step 1 complete")
        parts = {
            n.name: sorted(p.name for p in (n.watch_dir / f"step_{STEP}").iterdir()) for n in fleet.nodes
        }
        saved = {
            name: (n.watch_dir / f"step_{STEP}" / name).read_bytes()
            for n in fleet.nodes
            for name in parts[n.name]
        }
        detail = _api(fleet.nodes[0], "GET", f"/v1/checkpoints/{checkpoint['id']}")
        checksums = {f["path"]: f["checksum"] for f in detail["files"]}
        built = World(fleet, checkpoint["id"], saved, parts)
        asyncio.run(_send_parts(fleet, built, checksums))
        lost = fleet.nodes[2]
        lost.kill()
        shutil.rmtree(lost.tier0)  # its NVMe replaced: tier 0 comes back empty
        lost.watch_dir.mkdir(parents=True)
        fleet.restart(lost)
        yield built
    finally:
        fleet.stop()


def _load(directory: Path, rank: int) -> Any:
    import torch
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.state_dict_loader import load

    state = {f"rank{rank}": {"weight": torch.zeros(SHARD_FLOATS)}}
    load(state, storage_reader=FileSystemReader(directory), no_dist=True)
    return state[f"rank{rank}"]["weight"]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_a_wiped_node_restores_its_ranks_from_its_peers_and_every_rank_loads_what_was_saved(
    world: World,
) -> None:
    import torch

    fleet = world.fleet
    for rank, node in enumerate(fleet.nodes):
        target = node.tier0 / "restore" / f"rank{rank}"
        with Client(node.url, OPS_TOKEN) as client:
            client.ensure_local(RUN, STEP, target, ranks=[rank])
        assert {p.name: p.read_bytes() for p in target.iterdir()} == {
            shard_name(rank): world.saved[shard_name(rank)],
            ".metadata": world.saved[".metadata"],
        }
        torch.manual_seed(STEP * 1000 + rank)
        assert torch.equal(_load(target, rank), torch.randn(SHARD_FLOATS))
    lost = fleet.nodes[2]
    (restore,) = [r for r in _api(lost, "GET", "/v1/restores")["items"] if r["target"].endswith("rank2")]
    from_peer = [restore["source_tier"]] + [f["to_tier"] for f in restore["fallbacks"]]
    assert "peer:node0" in from_peer, restore  # node 2's shard: from node 0, in its own rack
    assert {f["from_tier"] for f in restore["fallbacks"]} <= {"nvme"}, restore


def test_a_tampered_peer_copy_falls_back_to_the_other_holder_and_is_marked_failed(world: World) -> None:
    fleet = world.fleet
    lost, nearest = fleet.nodes[2], fleet.nodes[0]
    relpath = f"{RUN}/step_{STEP}/{shard_name(2)}"
    kept = nearest.root / "peer" / lost.name / str(world.checkpoint_id) / relpath
    data = bytearray(kept.read_bytes())
    data[len(data) // 2] ^= 0x40
    kept.write_bytes(bytes(data))
    target = lost.tier0 / "restore" / "tampered"
    body = {"checkpoint_id": world.checkpoint_id, "target": str(target), "ranks": [2]}
    job = _api(lost, "POST", "/v1/restores", json=body)
    done = fleet.wait_for(
        lambda: (r := _api(lost, "GET", f"/v1/restores/{job['id']}"))["state"] in ("done", "failed") and r,
        60,
        "the restore past the tampered copy",
    )
    assert done["state"] == "done", done
    assert (target / shard_name(2)).read_bytes() == world.saved[shard_name(2)]
    fallbacks = [(f["file"], f["from_tier"], f["to_tier"]) for f in done["fallbacks"]]
    assert (shard_name(2), "peer:node0", "peer:node1") in fallbacks, done
    detail = _api(lost, "GET", f"/v1/checkpoints/{world.checkpoint_id}")
    copies = {(c["node"], c["holder"]): c["state"] for c in detail["node_loss"]["peer_copies"]}
    assert copies.pop(("node2", "node0")) == "failed"
    assert set(copies.values()) == {"verified"}


def test_tierd_restore_by_node_name_puts_back_exactly_that_nodes_part_on_its_tier0(world: World) -> None:
    """Last: with its part back on tier 0, node 2's daemon records it there again."""
    lost = world.fleet.nodes[2]
    step = lost.watch_dir / f"step_{STEP}"
    argv = [
        sys.executable,
        "-m",
        "tierd",
        "restore",
        str(world.checkpoint_id),
        "--to-tier0",
        "--node",
        lost.name,
    ]
    env = {**os.environ, "TIERD_URL": lost.url, "TIERD_TOKEN": OPS_TOKEN}
    done = subprocess.run([*argv, "--wait", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["state"] == "done"
    assert {p.name: p.read_bytes() for p in step.iterdir()} == {shard_name(2): world.saved[shard_name(2)]}
