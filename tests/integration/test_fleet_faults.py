"""Faults under a running fleet: PostgreSQL restarted, a node killed mid-upload."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

from tests.fixtures.fleet import RUN, Fleet, FleetSpec, Node, PostgresSwitch
from tests.fixtures.pgserver import PostgresServer, pg_available, postgres_server
from tests.fixtures.s3servers import TEST_PART_SIZE
from tests.integration.daemon_helpers import uploads, write_files
from tests.integration.fleet_jobs import dcp_metadata, shard_name, write_step
from tierd.daemon.catalog.db import Database

pytestmark = [pytest.mark.slow]


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL for this test alone: it is stopped and started under the fleet."""
    if not pg_available():
        pytest.skip("initdb/pg_ctl not installed")
    with postgres_server(durable=False) as server:
        yield server


def _verified(fleet: Fleet, step: int) -> dict[str, Any] | None:
    checkpoint = fleet.checkpoints().get(step)
    if checkpoint is None or checkpoint["state"] != "complete":
        return None
    replicas = {r["tier"]: r["state"] for r in checkpoint["replicas"]}
    return checkpoint if all(replicas.get(t) == "verified" for t in ("pfs", "s3")) else None


def _write_per_node(fleet: Fleet, base: int) -> dict[str, bytes]:
    """Each node's own whole step ``base + index``: four small shards and ``.metadata``."""
    written = {}
    for node in fleet.nodes:
        step = base + node.index
        files = write_step(node.watch_dir / f"step_{step}", 4, 32 * 1024, seed=step)
        written.update({f"{RUN}/step_{step}/{name}": data for name, data in files.items()})
    return written


def test_postgresql_restarted_under_the_fleet(
    make_fleet: Callable[..., Fleet], own_postgres: PostgresServer
) -> None:
    fleet = make_fleet(
        FleetSpec(nodes=4, config={"reconcile_interval_seconds": 5}), db_url=own_postgres.new_database()
    )
    before = _write_per_node(fleet, 100)
    for node in fleet.nodes:
        fleet.wait_for(partial(_verified, fleet, 100 + node.index), 60, f"step {100 + node.index} verified")
    in_flight = _write_per_node(fleet, 200)  # the outage may cut their recording or their copies

    switch = PostgresSwitch.of(own_postgres)
    switch.stop()
    fleet.wait_for(
        lambda: all(n.readyz()[0] == 503 for n in fleet.nodes), 30, "every node to say it is not ready"
    )
    for node in fleet.nodes:
        _status, body = node.readyz()
        assert any("catalog" in check for check in body["checks"]), body
    meanwhile = _write_per_node(fleet, 300)  # written while the catalog is away
    switch.start()
    fleet.wait_for(lambda: all(n.ready() for n in fleet.nodes), 60, "every node to be ready again")

    for base in (200, 300):
        for node in fleet.nodes:
            fleet.wait_for(
                partial(_verified, fleet, base + node.index), 90, f"step {base + node.index} verified"
            )
    assert all(n.daemon.alive() for n in fleet.nodes)
    written = {**before, **in_flight, **meanwhile}
    assert fleet.proxy is not None
    assert fleet.proxy.count("PutObject") == dict.fromkeys(written, 1), "no file uploaded twice, none lost"
    assert {
        str(p.relative_to(fleet.pfs)): p.read_bytes() for p in fleet.pfs.rglob("*") if p.is_file()
    } == written
    assert sorted(fleet.checkpoints()) == sorted(b + n.index for b in (100, 200, 300) for n in fleet.nodes)


def test_a_node_killed_mid_upload_finishes_its_parts_after_restart(make_fleet: Callable[..., Fleet]) -> None:
    """Node 1 dies (kill -9) while its multipart upload to S3 is half done; restarted, it resumes
    the upload: the parts the store acknowledged before the kill are not sent again."""
    fleet = make_fleet(FleetSpec(nodes=3, with_pfs=False, s3={"concurrency": 1}))
    node = fleet.nodes[1]
    key = f"{RUN}/step_7/{shard_name(1)}"
    assert fleet.proxy is not None
    fleet.proxy.hold_parts(key, after=2)
    sizes = {shard_name(1): 4 * TEST_PART_SIZE + 4096, ".metadata": 64}
    written = {
        f"{RUN}/step_7/{n}": d for n, d in write_files(node.watch_dir / "step_7", sizes, seed=7).items()
    }
    acknowledged = _kill_mid_upload(fleet, node, key)

    fleet.wait_for(lambda: _verified_s3(fleet, 7), 90, "step 7 verified on s3 after the restart")
    _uploaded_once_resumed(fleet, node, key, acknowledged, written)


def test_a_node_killed_mid_upload_finishes_its_part_of_a_3_node_step(
    make_fleet: Callable[..., Fleet],
) -> None:
    """The same within a step spread over three nodes: the step is verified on S3 only once the
    restarted node's part is there, and every other node's files went up once."""
    fleet = make_fleet(FleetSpec(nodes=3, with_pfs=False, watch={"nodes": 3}, s3={"concurrency": 1}))
    node = fleet.nodes[1]
    key = f"{RUN}/step_8/{shard_name(1)}"
    assert fleet.proxy is not None
    fleet.proxy.hold_parts(key, after=2)
    sizes = [64 * 1024, 4 * TEST_PART_SIZE + 4096, 64 * 1024]
    written: dict[str, bytes] = {}
    for rank, size in enumerate(sizes):  # written now, as a save does (not with old mtimes)
        shard = fleet.nodes[rank].watch_dir / "step_8" / shard_name(rank)
        shard.parent.mkdir(parents=True, exist_ok=True)
        shard.write_bytes(os.urandom(size))
        written[f"{RUN}/step_8/{shard.name}"] = shard.read_bytes()
    coordinator = fleet.nodes[0].watch_dir / "step_8"
    (coordinator / ".metadata.tmp").write_bytes(dcp_metadata(sizes))
    (coordinator / ".metadata.tmp").rename(coordinator / ".metadata")
    written[f"{RUN}/step_8/.metadata"] = (coordinator / ".metadata").read_bytes()
    acknowledged = _kill_mid_upload(fleet, node, key)

    assert not _verified_s3(fleet, 8), "verified on s3 while node 1's part was not"
    fleet.wait_for(lambda: _verified_s3(fleet, 8), 90, "step 8 verified on s3 after the restart")
    _uploaded_once_resumed(fleet, node, key, acknowledged, written)
    detail = fleet.checkpoint(fleet.checkpoints()[8]["id"])
    assert {p["node"] for p in detail["parts"]} == {n.name for n in fleet.nodes}


def _kill_mid_upload(fleet: Fleet, node: Node, key: str) -> set[int]:
    """Once ``key``'s third part is held in flight and two are recorded: kill -9 ``node``, let
    the held request fail, start it again. The part numbers acknowledged before the kill."""
    proxy = fleet.proxy
    assert proxy is not None
    fleet.wait_for(proxy.holding.is_set, 60, "the third part of the upload to be in flight")
    db = Database(fleet.db_url)
    try:
        recorded = fleet.wait_for(lambda: _recorded_parts(db, key), 30, "two parts recorded in the catalog")
    finally:
        db.dispose()
    acknowledged = set(proxy.parts(key))
    assert set(recorded) == acknowledged == {1, 2}
    node.kill()
    proxy.release()
    fleet.restart(node)
    return acknowledged


def _uploaded_once_resumed(
    fleet: Fleet, node: Node, key: str, acknowledged: set[int], written: dict[str, bytes]
) -> None:
    proxy = fleet.proxy
    assert proxy is not None
    parts = proxy.parts(key)
    assert sorted(parts) == [1, 2, 3, 4, 5]
    for number in acknowledged:
        assert parts[number] == 1, f"part {number} was acknowledged before the kill and sent again"
    assert proxy.count("CreateMultipartUpload") == {key: 1}, "the upload was not started over"
    assert proxy.count("CompleteMultipartUpload") == {key: 1}
    small = {k for k in written if k != key}
    assert proxy.count("PutObject") == dict.fromkeys(small, 1)
    assert fleet.s3 is not None
    assert fleet.s3.client().get_object(Bucket=fleet.bucket, Key=key)["Body"].read() == written[key]
    resumed = [e for name, e in fleet.events("upload_resume_loaded") if name == node.name]
    assert [e["relpath"] for e in resumed] == [key]


def _recorded_parts(db: Database, key: str) -> list[int] | None:
    found = [parts for _, relpath, _, parts in uploads(db) if relpath == key]
    return sorted(found[0]) if found and len(found[0]) >= 2 else None


def _verified_s3(fleet: Fleet, step: int) -> bool:
    checkpoint = fleet.checkpoints().get(step)
    if checkpoint is None:
        return False
    return any(r["tier"] == "s3" and r["state"] == "verified" for r in checkpoint["replicas"])
