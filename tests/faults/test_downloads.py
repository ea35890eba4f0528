"""Hops out of S3 (into a POSIX tier) through the fault proxy: small objects (pipelined on
rclone, whose connections stay open; one GET at a time on moto, which closes them) and a
big one (ranged GETs), one fault kind at a time.

A retryable fault ends with the replica verified and every file equal to the source; a
refusal ends ``failed`` naming the store's answer; sends stay within the "Retries" table.
The upload each test reads back is made once per server (``download_world``), not per test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.hops import Hops, attempts_over_table, download_world, stall_timeouts
from tests.fixtures.faultproxy import ACCESS_DENIED, INTERNAL_ERROR, SLOW_DOWN, Fault, Rule
from tests.fixtures.s3servers import S3Server
from tests.integration.daemon_helpers import MiB

#: 70 small objects: two groups (64 files a group), read one group at a time (``concurrency: 1``),
#: so the second is pipelined once the first has shown botocore the bucket.
SIZES = {
    **{f"shard{i:02d}.bin": 20 * 1024 + i for i in range(70)},
    "big.bin": 7 * MiB + 5,
    ".metadata": 3000,
}
BIG = "*/big.bin"
DROPPING = frozenset({"reset_request", "reset_response", "truncate", "stall"})

ANY_STORE = {
    "500 on a GET": Rule(INTERNAL_ERROR, operation="GetObject", nth=1),
    "503 SlowDown on three GETs": Rule(SLOW_DOWN, operation="GetObject", first=3),
    "reset mid-answer of a GET of the big object": Rule(
        Fault("reset_response"), operation="GetObject", key=BIG, nth=2
    ),
    "truncated opening GET of the big object": Rule(Fault("truncate"), operation="GetObject", key=BIG, nth=1),
    "stalled GET of the big object": Rule(Fault("stall"), operation="GetObject", key=BIG, nth=2),
    "wrong checksum in every GET answer": Rule(Fault("checksum"), operation="GetObject"),
    "wrong ETag in the opening GET of the big object": Rule(
        Fault("etag"), operation="GetObject", key=BIG, nth=1
    ),
    "wrong ETag in a GET answer of a small object": Rule(
        Fault("etag"), operation="GetObject", key="*/shard0*"
    ),
}
PIPELINED = {
    "500 on a pipelined GET": Rule(INTERNAL_ERROR, operation="GetObject", pipelined=True, nth=1),
    "503 SlowDown on pipelined GETs": Rule(SLOW_DOWN, operation="GetObject", pipelined=True, first=5),
    "reset mid-answer of a pipelined GET": Rule(Fault("reset_response"), pipelined=True, nth=3),
    "truncated pipelined GET": Rule(Fault("truncate"), pipelined=True, nth=2),
    "stalled pipelined GET": Rule(Fault("stall"), pipelined=True, nth=1),
    "wrong ETag in every pipelined answer": Rule(Fault("etag"), pipelined=True),
}


async def _download(world: Hops, rule: Rule) -> None:
    world.proxy.set_rules([rule])
    replica = await world.hop("pfs")
    world.proxy.release()
    assert (replica.state, replica.error) == ("verified", None), world.proxy.fired
    assert world.proxy.fired
    assert world.copied("pfs") == world.data
    assert attempts_over_table(world.proxy, dropped=rule.fault.kind in DROPPING) == {}


@pytest.mark.parametrize("case", list(ANY_STORE))
async def test_retryable_faults_end_verified_on_moto(
    tmp_path: Path, moto_server: S3Server, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    stall_timeouts(monkeypatch, ANY_STORE[case])
    async with download_world(tmp_path, moto_server, SIZES, concurrency=1) as world:
        await _download(world, ANY_STORE[case])
        # moto closes the connection after each answer: pipelining ends at its first group
        assert world.proxy.pipelined["GetObject"] < 64


@pytest.mark.parametrize("case", list(ANY_STORE) + list(PIPELINED))
async def test_retryable_faults_end_verified_on_rclone(
    tmp_path: Path, rclone_server: S3Server, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    stall_timeouts(monkeypatch, {**ANY_STORE, **PIPELINED}[case])
    async with download_world(tmp_path, rclone_server, SIZES, concurrency=1) as world:
        await _download(world, {**ANY_STORE, **PIPELINED}[case])
        assert world.proxy.pipelined["GetObject"] > 0


@pytest.mark.parametrize("key", [BIG, "*/shard01.bin"])
async def test_access_denied_fails_naming_the_answer(
    tmp_path: Path, rclone_server: S3Server, key: str
) -> None:
    async with download_world(tmp_path, rclone_server, SIZES, concurrency=1) as world:
        world.proxy.set_rules([Rule(ACCESS_DENIED, operation="GetObject", key=key)])
        replica = await world.hop("pfs")
        assert replica.state == "failed"
        assert replica.error is not None
        assert "403 AccessDenied" in replica.error
        assert (world.job("pfs").state, world.job("pfs").detail["reason"]) == ("failed", "permanent")
        assert attempts_over_table(world.proxy) == {}
        assert not (world.root / "pfs" / "demo" / "step1" / ".metadata").exists()
