"""Restore from a peer, end to end: three daemons on one PostgreSQL, each with its own tier 0 and
peer directory on its own loopback address (node0 and node1 in rack0, node2 in rack1), a real
3-rank DCP save spread over them, the PFS hop held back (its directory is not mounted: it never
gets the step). The daemons send each node's part to both other nodes themselves (the
replication service, ``replicas: 2``). Node 1 is killed with SIGKILL, its tier 0 wiped, and a
fresh daemon started for it: every rank's ``Client.ensure_local`` restores its shards (node 1's
from node 0, in its own rack) byte for byte, and ``dcp.load`` on every rank gives what was
saved. A byte flipped in node 0's copy sends the restore to node 2, and that copy is marked
failed. ``tierd restore --to-tier0 --node node1`` puts back node 1's part on its tier 0, and
nothing else.

One fleet for the module. It needs more than 5 s: three daemons, a 3-rank gloo save (forked
ranks sharing this process's torch), and the peer copies sent before node 1 dies.
"""

from __future__ import annotations

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

from tests.fixtures.fleet import ADMIN_TOKEN, RUN, Fleet, FleetSpec, Node, build_fleet
from tests.fixtures.pgserver import PostgresServer
from tests.integration.fleet_jobs import SHARD_FLOATS, dcp_save, shard_name
from tierd.client import Client

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("peer_restore")]  # one fleet, tests in order

OPS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
STEP = 1
LOST = 1  # shares rack0 with node 0, which holds the nearest copy of its part


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


def _complete(fleet: Fleet) -> dict[str, Any] | None:
    page = _api(fleet.nodes[0], "GET", "/v1/checkpoints", params={"run": RUN})
    found = [c for c in page["items"] if c["step"] == STEP and c["state"] == "complete"]
    return found[0] if found else None


def _all_sent(fleet: Fleet, checkpoint_id: int) -> bool:
    """Whether every part has a verified copy on both other nodes."""
    detail = _api(fleet.nodes[0], "GET", f"/v1/checkpoints/{checkpoint_id}")
    copies = detail["node_loss"]["peer_copies"]
    return len([c for c in copies if c["state"] == "verified"]) == 6


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer) -> Iterator[World]:
    root = tmp_path_factory.mktemp("peer-restore")
    spec = FleetSpec(
        nodes=3,
        watch={"nodes": 3},
        with_s3=False,
        pfs={"path": str(root / "pfs-not-mounted")},  # the PFS hop never gets the step
        peer={"replicas": 2},
        domains=2,
    )
    fleet = build_fleet(root / "fleet", postgres_server.new_database(), spec)
    try:
        fleet.start()
        dcp_save(root / "init", [n.watch_dir for n in fleet.nodes], step=STEP)
        checkpoint = fleet.wait_for(lambda: _complete(fleet), 90, "step 1 complete")
        steps = {n.name: n.watch_dir / f"step_{STEP}" for n in fleet.nodes}
        parts = {name: sorted(p.name for p in step.iterdir()) for name, step in steps.items()}
        saved = {f: (steps[name] / f).read_bytes() for name, files in parts.items() for f in files}
        fleet.wait_for(lambda: _all_sent(fleet, checkpoint["id"]), 90, "every part on both other nodes")
        lost = fleet.nodes[LOST]
        lost.kill()
        shutil.rmtree(lost.tier0)  # its NVMe replaced: tier 0 comes back empty
        lost.watch_dir.mkdir(parents=True)
        fleet.restart(lost)
        yield World(fleet, checkpoint["id"], saved, parts)
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
        with Client(node.url, ADMIN_TOKEN) as client:
            client.ensure_local(RUN, STEP, target, ranks=[rank])
        assert {p.name: p.read_bytes() for p in target.iterdir()} == {
            shard_name(rank): world.saved[shard_name(rank)],
            ".metadata": world.saved[".metadata"],
        }
        torch.manual_seed(STEP * 1000 + rank)
        assert torch.equal(_load(target, rank), torch.randn(SHARD_FLOATS))
    lost = fleet.nodes[LOST]
    (restore,) = [
        r for r in _api(lost, "GET", "/v1/restores")["items"] if r["target"].endswith(f"rank{LOST}")
    ]
    # node 1's shard from node 0, in its own rack (node 2 holds it too); the .metadata, node 0's
    # part, from the copy node 1 keeps for node 0 in its own peer directory
    assert restore["read_from"] == {"peer:node0": 1, "peer:node1": 1}, restore
    # its part's copy on the wiped tier 0 is known gone (the reconcile, or ensure_local's look
    # before the restore), so tier 0 is never read for it: no fallback
    assert restore["fallbacks"] == [], restore


def test_a_tampered_peer_copy_falls_back_to_the_other_holder_and_is_marked_failed(world: World) -> None:
    fleet = world.fleet
    lost, nearest = fleet.nodes[LOST], fleet.nodes[0]
    relpath = f"{RUN}/step_{STEP}/{shard_name(LOST)}"
    kept = nearest.root / "peer" / lost.name / str(world.checkpoint_id) / relpath
    data = bytearray(kept.read_bytes())
    data[len(data) // 2] ^= 0x40
    kept.write_bytes(bytes(data))
    target = lost.tier0 / "restore" / "tampered"
    body = {"checkpoint_id": world.checkpoint_id, "target": str(target), "ranks": [LOST]}
    job = _api(lost, "POST", "/v1/restores", json=body)
    done = fleet.wait_for(
        lambda: (r := _api(lost, "GET", f"/v1/restores/{job['id']}"))["state"] in ("done", "failed") and r,
        60,
        "the restore past the tampered copy",
    )
    assert done["state"] == "done", done
    assert (target / shard_name(LOST)).read_bytes() == world.saved[shard_name(LOST)]
    fallbacks = [(f["file"], f["from_tier"], f["to_tier"]) for f in done["fallbacks"]]
    assert (shard_name(LOST), "peer:node0", "peer:node2") in fallbacks, done
    detail = _api(lost, "GET", f"/v1/checkpoints/{world.checkpoint_id}")
    copies = {(c["node"], c["holder"]): c["state"] for c in detail["node_loss"]["peer_copies"]}
    # failed (then dropped from node 0 and sent again by the replication service)
    assert copies.pop(("node1", "node0"), "gone") != "verified"
    assert copies.pop(("node0", "node2")) == "verified"
    audit = _api(lost, "GET", "/v1/audit", params={"checkpoint_id": world.checkpoint_id, "limit": 1000})
    failed = [e["detail"] for e in audit["items"] if e["action"] == "peer_copy_failed"]
    assert [(d["node"], d["holder"]) for d in failed] == [("node1", "node0")]


def _tier0_copies(world: World) -> dict[str, dict[str, Any]]:
    """Each node's part's copy on tier 0 (``nvme``), as the API shows it."""
    detail = _api(world.fleet.nodes[0], "GET", f"/v1/checkpoints/{world.checkpoint_id}")
    return {p["node"]: p["tiers"]["nvme"] for p in detail["parts"]}


def _tier0_copy_of_part(world: World, node: Node) -> str:
    """The state of ``node``'s part's copy on tier 0."""
    state: str = _tier0_copies(world)[node.name]["state"]
    return state


def test_tierd_restore_by_node_name_puts_back_exactly_that_nodes_part_on_its_tier0(world: World) -> None:
    """Last: with its part back on tier 0, node 1's daemon records that copy verified again.

    Only that one: the other nodes' copies on their own tiers 0 are not its to vouch for (a
    restore by node name used to mark every part's copy verified, as a whole restore does).
    """
    lost = world.fleet.nodes[LOST]
    step = lost.watch_dir / f"step_{STEP}"
    # the wiped tier 0, seen by node 1's reconcile (deleted), or by a restore that read it (failed)
    seen = world.fleet.wait_for(
        lambda: (state := _tier0_copy_of_part(world, lost)) != "verified" and state, 60, "the part seen gone"
    )
    assert seen in ("deleted", "failed")
    others = {name: copy for name, copy in _tier0_copies(world).items() if name != lost.name}
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
    env = {**os.environ, "TIERD_URL": lost.url, "TIERD_TOKEN": ADMIN_TOKEN}
    done = subprocess.run([*argv, "--wait", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    restore = json.loads(done.stdout)
    # from a holder of node 1's part: node 0 (same rack), or node 2 once node 0's copy was
    # found tampered by the test before (when both ran on one fleet)
    assert (restore["state"], restore["node"]) == ("done", "node1")
    assert restore["source_tier"] in {"peer:node0", "peer:node2"}
    assert {p.name: p.read_bytes() for p in step.iterdir()} == {
        shard_name(LOST): world.saved[shard_name(LOST)]
    }
    after = _tier0_copies(world)
    assert after.pop(lost.name)["state"] == "verified"
    assert after == others
