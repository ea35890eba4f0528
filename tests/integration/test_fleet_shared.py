"""Eight daemons watching one shared tier-0 directory (training writes straight to the parallel
file system): each step is recorded once, and every file reaches each further tier once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from tests.fixtures.fleet import RUN, Fleet, FleetSpec
from tests.fixtures.s3servers import TEST_PART_SIZE
from tests.integration.daemon_helpers import write_files
from tests.integration.fleet_jobs import shard_name

pytestmark = [pytest.mark.slow]

NODES = 8
STEPS = (10, 20)


def _verified(fleet: Fleet, step: int) -> dict[str, Any] | None:
    checkpoint = fleet.checkpoints().get(step)
    if checkpoint is None or checkpoint["state"] != "complete":
        return None
    replicas = {r["tier"]: r["state"] for r in checkpoint["replicas"]}
    return checkpoint if replicas.get("pfs") == replicas.get("s3") == "verified" else None


def _write(fleet: Fleet, step: int) -> dict[str, bytes]:
    """One shard bigger than an S3 part (a multipart upload), eight small ones, ``.metadata`` last."""
    sizes = {"big.bin": TEST_PART_SIZE + 1024 * 1024}
    sizes.update({shard_name(r): 128 * 1024 for r in range(NODES)})
    sizes[".metadata"] = 64
    files = write_files(fleet.nodes[0].watch_dir / f"step_{step}", sizes, seed=step)
    return {f"{RUN}/step_{step}/{name}": data for name, data in files.items()}


def test_every_file_is_copied_once_by_one_of_8_daemons(make_fleet: Callable[..., Fleet]) -> None:
    fleet = make_fleet(FleetSpec(nodes=NODES, shared_tier0=True))
    written: dict[str, bytes] = {}
    for step in STEPS:
        written.update(_write(fleet, step))
    for step in STEPS:
        fleet.wait_for(partial(_verified, fleet, step), 120, f"step {step} verified on pfs and s3")

    checkpoints = fleet.checkpoints()
    assert sorted(checkpoints) == list(STEPS), "each step recorded once"
    for checkpoint in checkpoints.values():
        audit = fleet.any_node().get("/v1/audit", checkpoint_id=checkpoint["id"])["items"]
        assert [e["action"] for e in audit].count("detected") == 1, audit

    assert {
        str(p.relative_to(fleet.pfs)): p.read_bytes() for p in fleet.pfs.rglob("*") if p.is_file()
    } == written
    proxy = fleet.proxy
    assert proxy is not None
    uploaded = proxy.count("PutObject") + proxy.count("CompleteMultipartUpload")
    assert uploaded == dict.fromkeys(written, 1), "every file uploaded exactly once"
    big = [key for key in written if key.endswith("big.bin")]
    for key in big:
        assert proxy.parts(key) == Counter({1: 1, 2: 1}), "each part of a multipart upload sent once"
    assert proxy.count("CreateMultipartUpload") == dict.fromkeys(big, 1)
