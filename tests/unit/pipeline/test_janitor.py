"""The stale-upload sweep never touches a tier the catalog still has uploads or jobs for."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from tests.unit.pipeline.helpers import TIERS, add_checkpoint
from tierd.daemon.backends.base import UploadState
from tierd.daemon.catalog.db import Database
from tierd.daemon.pipeline.janitor import Janitor, busy_tiers
from tierd.daemon.pipeline.resume import CatalogResumeStore
from tierd.daemon.pipeline.scheduler import schedule_pass


class FakeBackend:
    def __init__(self, name: str) -> None:
        self.name = name
        self.sweeps: list[float] = []

    async def abort_stale_uploads(self, older_than_seconds: float) -> int:
        self.sweeps.append(older_than_seconds)
        return 1

    def list(self, prefix: str = "") -> AsyncIterator[Any]:  # pragma: no cover - unused
        raise NotImplementedError


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_busy_tiers(db: Database) -> None:
    cid = add_checkpoint(db, 1, ("verified", "verified", "pending", "verified"))
    assert busy_tiers(db, TIERS) == set()
    schedule_pass(db, TIERS)  # queues the hop into s3
    await CatalogResumeStore(db, cid, "dr").begin("x", UploadState("u", "x", 1, 1))
    assert busy_tiers(db, TIERS) == {"s3", "dr"}
    assert busy_tiers(db, ["pfs"]) == set()


async def test_sweeps_idle_tiers_on_schedule_and_busy_ones_later(sqlite_db: Database) -> None:
    db = sqlite_db
    cid = add_checkpoint(db, 1, ("verified", "verified", "verified", "verified"))
    store = CatalogResumeStore(db, cid, "s3")
    await store.begin("x", UploadState("u", "x", 1, 1))
    backends: dict[str, Any] = {name: FakeBackend(name) for name in ("pfs", "s3")}
    clock = Clock()
    janitor = Janitor(db, backends, older_than=86400, interval=3600, clock=clock)

    assert await janitor.sweep_due() == 1
    assert (backends["pfs"].sweeps, backends["s3"].sweeps) == ([86400], [])  # s3 has an upload to resume
    clock.now += 10
    assert await janitor.sweep_due() == 0  # pfs not due, s3 still busy
    await store.clear("x")
    assert await janitor.sweep_due() == 1  # s3 idle now: swept on the next pass
    assert backends["s3"].sweeps == [86400]
    clock.now += 3600
    assert await janitor.sweep_due() == 2
