"""Scrubbing over real HTTP: POST /v1/checkpoints/{id}/verify (roles, 404, results) and GET /v1/tiers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.world import World
from tests.unit.scrub.helpers import checksum_of, flip_byte, relpaths, scrub_world, scrubber, set_checked
from tierd.api.app import create_app
from tierd.api.server import ApiService
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import utcnow
from tierd.daemon.scrub import ScrubService

TOKENS = {"read": "r-token", "operate": "o-token"}
ALL = {"nvme": "verified", "pfs": "verified", "archive": "verified"}
PROBLEM = "application/problem+json"


@dataclass
class Served:
    world: World
    scrub: ScrubService
    client: httpx.AsyncClient

    async def call(self, method: str, path: str, role: str | None = "operate", **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {TOKENS[role]}"} if role else {}
        return await self.client.request(method, path, headers=headers, **kw)


@pytest.fixture
async def served(tmp_path: Path, sqlite_db: Database) -> AsyncIterator[Served]:
    tokens = [{"name": f"{role}-bot", "token": token, "role": role} for role, token in TOKENS.items()]
    world = scrub_world(tmp_path, sqlite_db, top={"api": {"listen": "127.0.0.1:0", "tokens": tokens}})
    service = scrubber(world)
    api = ApiService(create_app(world.service.ctx), "127.0.0.1", 0)
    await api.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api.port}") as client:
            yield Served(world, service, client)
    finally:
        await api.stop(5)


async def test_verify_needs_the_operate_role(served: Served) -> None:
    cid = await served.world.add(1, on=ALL)
    anonymous = await served.call("POST", f"/v1/checkpoints/{cid}/verify", role=None)
    assert (anonymous.status_code, anonymous.headers["content-type"]) == (401, PROBLEM)
    reader = await served.call("POST", f"/v1/checkpoints/{cid}/verify", role="read")
    assert reader.status_code == 403
    assert "needs operate" in reader.json()["detail"]
    assert served.world.replica(cid, "pfs").checked_at is None


async def test_an_unknown_checkpoint_is_a_404_problem(served: Served) -> None:
    response = await served.call("POST", "/v1/checkpoints/999/verify")
    assert (response.status_code, response.headers["content-type"]) == (404, PROBLEM)
    assert "999" in response.json()["detail"]


async def test_verify_answers_per_tier_and_marks_the_bad_replica(served: Served) -> None:
    world = served.world
    cid = await world.add(1, on=ALL)
    ok = await served.call("POST", f"/v1/checkpoints/{cid}/verify")
    assert ok.status_code == 200
    assert ok.json()["ok"] is True
    assert [(t["tier"], t["result"], t["files"]) for t in ok.json()["tiers"]] == [
        ("nvme", "ok", []),
        ("pfs", "ok", []),
        ("archive", "ok", []),
    ]

    bad = relpaths(world, cid)[-1]
    flip_byte(world.tier_path("pfs", bad))
    world.tier_path("archive", relpaths(world, cid)[0]).unlink()
    response = await served.call("POST", f"/v1/checkpoints/{cid}/verify")
    body = response.json()
    assert (response.status_code, body["checkpoint_id"], body["ok"]) == (200, cid, False)
    by_tier = {t["tier"]: t for t in body["tiers"]}
    assert by_tier["nvme"]["result"] == "ok"
    assert by_tier["pfs"]["result"] == "mismatch"
    [file] = by_tier["pfs"]["files"]
    assert (file["file"], file["problem"], file["expected"]) == (
        bad,
        "mismatch",
        checksum_of(world, cid, bad),
    )
    assert file["actual"] not in (None, file["expected"])
    assert by_tier["archive"]["result"] == "missing"
    assert world.states(cid) == {"nvme": "verified", "pfs": "failed", "archive": "failed"}
    actors = {e["actor"] for e in (await served.call("GET", "/v1/audit", role="read")).json()["items"]}
    assert "api:operate-bot" in actors

    again = (await served.call("POST", f"/v1/checkpoints/{cid}/verify")).json()
    assert [t["result"] for t in again["tiers"]] == ["ok", "skipped", "skipped"]  # failed: nothing to check


async def test_tiers_show_the_scrubs_progress(served: Served) -> None:
    world = served.world
    first = await world.add(1, on=ALL)
    await world.add(2, on=ALL)
    set_checked(world.db, first, "pfs", utcnow())
    response = await served.call("GET", "/v1/tiers", role="read")
    assert response.status_code == 200
    tiers = {t["name"]: t for t in response.json()}
    assert tiers["nvme"]["scrub"] is None
    scrub = tiers["pfs"]["scrub"]
    assert (scrub["every"], scrub["bandwidth"], scrub["total"]) == (7 * 86_400, 1_000_000, 2)
    assert scrub["checked"] == 1  # checked just now; the other was verified months ago
    assert scrub["oldest_unchecked_age_seconds"] > 86_400
    assert scrub["last_pass_at"] is None  # the scrubber has not finished a pass

    assert await served.scrub.check_round("pfs") == 1
    assert await served.scrub.check_round("pfs") == 0
    scrub = {t["name"]: t for t in (await served.call("GET", "/v1/tiers", role="read")).json()}["pfs"][
        "scrub"
    ]
    assert scrub["last_pass_at"] is not None
