"""Restores out of S3 through the fault proxy (the restore runner in-process, on rclone).

The bucket is the only tier holding the checkpoint. Its small objects are read in
pipelined groups (the backend learned the bucket's route while writing them), the big
one in ranges. A retryable fault ends the restore ``done`` with every byte right; a 403
ends it ``failed``, naming the store's answer, with nothing left in the target.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.faults.hops import attempts_over_table, stall_timeouts
from tests.fixtures.faultproxy import ACCESS_DENIED, SLOW_DOWN, Fault, FaultProxy, Rule
from tests.fixtures.s3servers import S3Server
from tests.fixtures.world import posix_tier
from tests.integration.daemon_helpers import tier_dict
from tests.unit.restore.harness import RestoreWorld
from tierd.daemon.backends import close_backends
from tierd.daemon.catalog.db import Database

STEP = {
    **{f"__{i}_0.distcp": os.urandom(30_000 + i) for i in range(12)},
    "big.bin": os.urandom(2_500_000),
    ".metadata": b"meta" * 50,
}
ONLY_IN_S3 = {"nvme": "deleted", "s3": "verified"}

RETRYABLE = {
    "503 SlowDown on three GETs": Rule(SLOW_DOWN, operation="GetObject", first=3),
    "reset mid-answer of a pipelined GET": Rule(Fault("reset_response"), pipelined=True, nth=2),
    "truncated GET of the big object": Rule(Fault("truncate"), operation="GetObject", key="*/big.bin", nth=1),
    "stalled pipelined GET": Rule(Fault("stall"), pipelined=True, nth=1),
    "wrong ETag in the big object's first answer": Rule(Fault("etag"), key="*/big.bin", nth=1),
}


@pytest.fixture
async def lab(
    tmp_path: Path, sqlite_db: Database, rclone_server: S3Server
) -> AsyncIterator[tuple[RestoreWorld, FaultProxy]]:
    with FaultProxy(rclone_server.endpoint_url) as proxy:
        s3 = tier_dict(rclone_server.new_tier("s3", endpoint_url=proxy.endpoint_url))
        made = RestoreWorld.make(tmp_path, sqlite_db, [posix_tier(tmp_path, "nvme"), s3])
        try:
            yield made, proxy
        finally:
            await close_backends(made.world.backends)


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", list(RETRYABLE))
async def test_retryable_faults_end_done(
    lab: tuple[RestoreWorld, FaultProxy], monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    stall_timeouts(monkeypatch, RETRYABLE[case])
    world, proxy = lab
    cid = await world.add(1, ONLY_IN_S3, STEP)
    proxy.reset_counts()
    proxy.set_rules([RETRYABLE[case]])
    target = world.root / "restores" / "r"
    row = await world.run(checkpoint_id=cid, target=str(target))
    proxy.release()
    assert (row.job.state, row.job.last_error) == ("done", None), proxy.fired
    assert proxy.fired
    assert proxy.pipelined["GetObject"] > 0
    assert files_under(target) == STEP
    assert attempts_over_table(proxy, dropped=True) == {}


async def test_access_denied_fails_naming_the_answer(lab: tuple[RestoreWorld, FaultProxy]) -> None:
    world, proxy = lab
    cid = await world.add(1, ONLY_IN_S3, STEP)
    proxy.set_rules([Rule(ACCESS_DENIED, operation="GetObject", key="*/big.bin")])
    target = world.root / "restores" / "r"
    row = await world.run(checkpoint_id=cid, target=str(target))
    assert row.job.state == "failed"
    assert row.job.last_error is not None
    assert "403 AccessDenied" in row.job.last_error
    assert not target.exists() or files_under(target) == {}  # cleaned up
