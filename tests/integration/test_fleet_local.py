"""Eight daemons, each with its own tier-0 directory (node-local NVMe), on one PostgreSQL catalog,
sharing a parallel-FS directory and an S3 bucket: an 8-rank DCP save spread over them becomes one
complete step, copied to each shared tier exactly once per file, and a rank's shards restore on
its node."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.fleet import RUN, Fleet, FleetSpec
from tests.integration.fleet_jobs import dcp_save, shard_name, write_step

pytestmark = [pytest.mark.slow]

NODES = 8


def _verified_everywhere(
    fleet: Fleet, step: int, tiers: tuple[str, ...] = ("pfs", "s3")
) -> dict[str, Any] | None:
    checkpoint = fleet.checkpoints().get(step)
    if checkpoint is None or checkpoint["state"] != "complete":
        return None
    replicas = {r["tier"]: r["state"] for r in checkpoint["replicas"]}
    return checkpoint if all(replicas.get(t) == "verified" for t in tiers) else None


def _files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_independent_steps_on_each_node_are_copied_once(make_fleet: Callable[..., Fleet]) -> None:
    """The harness alone: three daemons, each node's own whole step, each file PUT once."""
    fleet = make_fleet(FleetSpec(nodes=3))
    written = {}
    for node in fleet.nodes:
        step = node.index + 1
        files = write_step(node.watch_dir / f"step_{step}", 2, 4096, seed=step)
        written.update({f"{RUN}/step_{step}/{name}": data for name, data in files.items()})
    for step in (1, 2, 3):
        fleet.wait_for(partial(_verified_everywhere, fleet, step), 60, f"step {step} verified")
    assert fleet.proxy is not None
    assert fleet.proxy.count("PutObject") == dict.fromkeys(written, 1)
    assert _files_under(fleet.pfs) == written
    assert {c["step"]: c["node"] for c in fleet.checkpoints().values()} == {
        1: "node0",
        2: "node1",
        3: "node2",
    }


# dcp.load in this (non-distributed) process warns that it loads as a single process: it does.
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_an_8_rank_dcp_save_over_8_nodes_is_one_step_copied_once(
    make_fleet: Callable[..., Fleet], tmp_path: Path
) -> None:
    fleet = make_fleet(FleetSpec(nodes=NODES, watch={"nodes": NODES}))
    dcp_save(tmp_path / "init", [fleet.nodes[r % NODES].watch_dir for r in range(NODES)], step=1)
    step_dir = f"{RUN}/step_1"
    written = {
        f"{step_dir}/{name}": data
        for node in fleet.nodes
        for name, data in _files_under(node.watch_dir / "step_1").items()
    }
    assert set(written) == {f"{step_dir}/{shard_name(r)}" for r in range(NODES)} | {f"{step_dir}/.metadata"}

    checkpoint = fleet.wait_for(lambda: _verified_everywhere(fleet, 1), 120, "step 1 verified on pfs and s3")
    detail = fleet.checkpoint(checkpoint["id"])
    assert {p["node"] for p in detail["parts"]} == {n.name for n in fleet.nodes}
    assert not detail["missing"]
    assert sorted(f["path"] for f in detail["files"]) == sorted(written)
    assert _files_under(fleet.pfs) == written
    assert fleet.proxy is not None
    uploads = fleet.proxy.count("PutObject") + fleet.proxy.count("CompleteMultipartUpload")
    assert uploads == dict.fromkeys(written, 1), "every file uploaded exactly once"

    rank = 5
    node = fleet.nodes[rank % NODES]
    target = node.tier0 / "restore" / "step_1"
    job = node.post("/v1/restores", {"run": RUN, "step": 1, "target": str(target), "ranks": [rank]})
    done = fleet.wait_for(
        lambda: (r := node.get(f"/v1/restores/{job['id']}"))["state"] in ("done", "failed") and r,
        60,
        "the restore",
    )
    assert done["state"] == "done", done
    assert _files_under(target) == {
        shard_name(rank): written[f"{step_dir}/{shard_name(rank)}"],
        ".metadata": written[f"{step_dir}/.metadata"],
    }
