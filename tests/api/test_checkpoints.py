"""GET /v1/checkpoints's filters, and a write answered only once it is committed, over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import event, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from tests.fixtures.world import World, posix_tier
from tierd.api.app import create_app
from tierd.api.server import ApiService
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import File
from tierd.daemon.catalog.ownership import RecordedDirectory, record_directories

ON = {"nvme": "verified"}


@pytest.fixture
async def world(tmp_path: Path, sqlite_db: Database) -> AsyncIterator[tuple[World, httpx.AsyncClient]]:
    """One POSIX tier, no tokens (authentication off), the API on 127.0.0.1."""
    world = World.make(tmp_path, sqlite_db, [posix_tier(tmp_path, "nvme")])
    world.service.ctx.watcher_running = True
    api = ApiService(create_app(world.service.ctx), "127.0.0.1", 0)
    await api.start()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api.port}") as client:
        yield world, client
    await api.stop(5)


async def test_list_by_run_and_step(world: tuple[World, httpx.AsyncClient]) -> None:
    catalog, client = world
    first = await catalog.add(1, on=ON)
    await catalog.add(2, on=ON)
    colon = await catalog.add(1, on=ON, run="team:exp")

    one = (await client.get("/v1/checkpoints", params={"run": "demo", "step": 1})).json()
    assert (one["total"], [c["id"] for c in one["items"]]) == (1, [first])
    every_run = (await client.get("/v1/checkpoints", params={"step": 1})).json()
    assert sorted(c["id"] for c in every_run["items"]) == sorted([first, colon])
    by_colon = (await client.get("/v1/checkpoints", params={"run": "team:exp", "step": 1})).json()
    assert [c["id"] for c in by_colon["items"]] == [colon]
    none = (await client.get("/v1/checkpoints", params={"run": "demo", "step": 3})).json()
    assert (none["total"], none["items"]) == (0, [])
    largest = await client.get("/v1/checkpoints", params={"step": 2**63 - 1})
    assert (largest.status_code, largest.json()["total"]) == (200, 0)


@pytest.mark.parametrize("step", ["-1", str(2**63), "seven"])
async def test_a_step_out_of_range_is_422(world: tuple[World, httpx.AsyncClient], step: str) -> None:
    _, client = world
    refused = await client.get("/v1/checkpoints", params={"step": step})
    assert refused.status_code == 422
    assert refused.headers["content-type"] == "application/problem+json"
    assert "step" in refused.json()["detail"]


@contextmanager
def failing_commits() -> Iterator[None]:
    """Every session that wrote something fails at commit, as a locked SQLite catalog would."""

    def wrote(session: Session, _context: object) -> None:
        session.info["wrote"] = True

    def refuse(session: Session) -> None:
        if session.info.pop("wrote", False):
            raise sa_exc.OperationalError("COMMIT", None, Exception("database is locked"))

    event.listen(Session, "after_flush", wrote)
    event.listen(Session, "before_commit", refuse)
    yield
    event.remove(Session, "before_commit", refuse)
    event.remove(Session, "after_flush", wrote)


async def test_a_write_that_fails_to_commit_is_not_answered_200(
    world: tuple[World, httpx.AsyncClient],
) -> None:
    catalog, client = world
    cid = await catalog.add(1, on=ON)
    with failing_commits():
        refused = await client.put(f"/v1/checkpoints/{cid}/pin")
    assert refused.status_code == 503
    assert "database is locked" in refused.json()["detail"]
    assert not catalog.checkpoint(cid).pinned


async def test_a_checkpoint_shows_each_file_and_directory_owner_and_mode(
    world: tuple[World, httpx.AsyncClient],
) -> None:
    catalog, client = world
    cid = await catalog.add(1, on=ON, files=1)
    with catalog.db.session() as s:
        shard = s.scalars(select(File).where(File.relpath == "demo/step00001/shard0.distcp")).one()
        shard.uid, shard.gid, shard.mode = 1234, 1234, 0o640
        record_directories(s, cid, [RecordedDirectory("demo/step00001", 1234, 1234, 0o2750)])
    detail = (await client.get(f"/v1/checkpoints/{cid}")).json()
    owners = {f["path"]: (f["uid"], f["gid"], f["mode"]) for f in detail["files"]}
    assert owners == {
        "demo/step00001/.metadata": (None, None, None),  # recorded before owners were kept
        "demo/step00001/shard0.distcp": (1234, 1234, "0640"),
    }
    assert detail["directories"] == [{"path": "demo/step00001", "uid": 1234, "gid": 1234, "mode": "2750"}]
