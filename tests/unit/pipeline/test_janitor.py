"""The stale-upload sweep runs on schedule, busy tiers included, and spares recorded uploads."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from typing import Any

from tests.fixtures.s3servers import S3Server
from tests.unit.catalog.helpers import TIERS, add_checkpoint
from tierd.daemon.backends import S3Backend
from tierd.daemon.backends.uploads import UploadState
from tierd.daemon.catalog.db import Database
from tierd.daemon.pipeline.janitor import Janitor
from tierd.daemon.pipeline.resume import CatalogResumeStore
from tierd.daemon.pipeline.scheduler import schedule_pass

DAY = 86400.0


class FakeBackend:
    def __init__(self, name: str) -> None:
        self.name = name
        self.sweeps: list[tuple[float, set[str]]] = []

    async def abort_stale_uploads(self, older_than_seconds: float, *, keep: Collection[str] = ()) -> int:
        self.sweeps.append((older_than_seconds, set(keep)))
        return 1

    def list(self, prefix: str = "") -> AsyncIterator[Any]:  # pragma: no cover - unused
        raise NotImplementedError


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_every_tier_is_swept_on_schedule_with_its_recorded_uploads_kept(sqlite_db: Database) -> None:
    db = sqlite_db
    cid = add_checkpoint(db, 1, ("verified", "verified", "pending", "verified"))
    schedule_pass(db, TIERS)  # a copy into s3 is queued: the tier is busy
    await CatalogResumeStore(db, cid, "s3").begin("x", UploadState("u", "x", 1, 1))
    backends: dict[str, Any] = {name: FakeBackend(name) for name in ("pfs", "s3")}
    clock = Clock()
    janitor = Janitor(db, backends, older_than=DAY, interval=3600, clock=clock)

    assert await janitor.sweep_due() == 2
    assert backends["pfs"].sweeps == [(DAY, set())]
    assert backends["s3"].sweeps == [(DAY, {"u"})]
    clock.now += 10
    assert await janitor.sweep_due() == 0  # not due yet
    clock.now += 3600
    assert await janitor.sweep_due() == 2


async def test_a_busy_s3_tier_loses_only_its_unrecorded_uploads(
    sqlite_db: Database, moto_server: S3Server
) -> None:
    db = sqlite_db
    backend = S3Backend(moto_server.new_tier("s3"))
    cid = add_checkpoint(db, 1, ("verified", "verified", "pending", "verified"))
    schedule_pass(db, TIERS)
    client = moto_server.client()
    stray = client.create_multipart_upload(Bucket=backend.bucket, Key="run/step1/a")["UploadId"]
    resumable = client.create_multipart_upload(Bucket=backend.bucket, Key="run/step1/b")["UploadId"]
    state = UploadState(resumable, "run/step1/b", 5 * 1024 * 1024, 6 * 1024 * 1024)
    await CatalogResumeStore(db, cid, "s3").begin("run/step1/b", state)
    try:
        # moto says every upload began in 2010: the day-long threshold protects nothing here.
        janitor = Janitor(db, {"s3": backend}, older_than=DAY, interval=3600)
        assert await janitor.sweep_due() == 1
    finally:
        await backend.close()
    left = client.list_multipart_uploads(Bucket=backend.bucket).get("Uploads", [])
    assert [u["UploadId"] for u in left] == [resumable]
    assert stray != resumable
