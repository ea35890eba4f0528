"""The scrubber on an S3 tier (moto's server): the store's full-object checksum, or a read-back."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.s3servers import S3Server
from tests.fixtures.world import World, posix_tier
from tests.unit.scrub.helpers import SCRUB, FakeClock, checksum_of, events, relpaths, sample, scrubber
from tierd.daemon.backends import close_backends
from tierd.daemon.catalog.db import Database

ON = {"nvme": "verified", "s3": "verified"}


@contextlib.asynccontextmanager
async def s3_world(root: Path, db: Database, server: S3Server, verify: str) -> AsyncIterator[World]:
    """Tier ``nvme`` and an S3 tier ``s3`` scrubbed at 10 kB/s; its backends closed after."""
    tier = server.new_tier("s3", verify=verify, scrub={"every": "7d", "bandwidth": "10kB"})
    spec: dict[str, Any] = {**tier.model_dump(), "secret_access_key": server.secret_access_key}
    world = World.make(root, db, [posix_tier(root, "nvme", scrub=SCRUB), spec])
    try:
        yield world
    finally:
        await close_backends(world.backends)


@pytest.mark.parametrize("verify", ["native", "readback"])
async def test_a_rotten_object_and_a_missing_one_are_found(
    tmp_path: Path, sqlite_db: Database, moto_server: S3Server, verify: str
) -> None:
    async with s3_world(tmp_path, sqlite_db, moto_server, verify) as world:
        await _rot_and_scrub(world, sqlite_db, moto_server, verify)


async def _rot_and_scrub(world: World, sqlite_db: Database, moto_server: S3Server, verify: str) -> None:
    good = await world.add(1, on=ON, files=1, size=5000)
    rotten = await world.add(2, on=ON, files=1, size=5000)
    missing = await world.add(3, on=ON, files=1, size=5000)
    bucket = world.config.tier("s3").bucket  # type: ignore[union-attr]
    client = moto_server.client()
    key = relpaths(world, rotten)[-1]
    body = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    body[0] ^= 0xFF
    # Stored again with its own checksum: the store now vouches for the rotten bytes.
    client.put_object(Bucket=bucket, Key=key, Body=bytes(body), ChecksumAlgorithm="CRC64NVME")
    gone = relpaths(world, missing)[0]
    client.delete_object(Bucket=bucket, Key=gone)
    clock = FakeClock()
    service = scrubber(world, clock=clock)

    assert await service.check_round("s3") == 3
    states = {cid: world.replica(cid, "s3").state for cid in (good, rotten, missing)}
    assert states == {good: "verified", rotten: "failed", missing: "failed"}
    found = {e.checkpoint_id: e.detail for e in events(sqlite_db, "replica_mismatch")}
    assert found[rotten]["file"] == key
    assert found[rotten]["problem"] == "mismatch"
    assert found[rotten]["expected"] == checksum_of(world, rotten, key)
    assert found[rotten]["actual"] not in (None, found[rotten]["expected"])
    assert (found[missing]["file"], found[missing]["problem"]) == (gone, "missing")
    assert sample(world, "tierd_scrub_replicas_total", tier="s3", result="ok") == 1
    assert sample(world, "tierd_scrub_mismatches_total", tier="s3") == 2
    # A native check reads nothing (the store answers with its checksum): no bandwidth is spent.
    assert (clock.now > 0) is (verify == "readback")
