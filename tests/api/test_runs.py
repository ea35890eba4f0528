"""``GET /v1/runs`` and ``GET /v1/runs/{run}/latest`` over real HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.world import World, posix_tier
from tierd.api.app import create_app
from tierd.api.server import ApiService
from tierd.daemon.catalog.db import Database

READ = {"Authorization": "Bearer r-token"}
PROBLEM = "application/problem+json"
ALL = {"nvme": "verified", "pfs": "verified", "object": "verified"}


@dataclass
class Served:
    world: World
    client: httpx.AsyncClient
    ids: dict[tuple[str, int], int]

    async def get(self, path: str, **params: Any) -> httpx.Response:
        return await self.client.get(path, params=params, headers=READ)


@pytest.fixture
async def served(tmp_path: Path, db: Database) -> AsyncIterator[Served]:
    """Tiers nvme and pfs (not durable) and object (durable), and three runs:

    demo: 1 everywhere, 2 on nvme and pfs (object failed), 3 on nvme only, 4 waiting;
    team/exp: 7 on nvme; other: 5 waiting.
    """
    tokens = [{"name": "viewer", "token": "r-token", "role": "read"}]
    world = World.make(
        tmp_path,
        db,
        [
            posix_tier(tmp_path, "nvme"),
            posix_tier(tmp_path, "pfs", durable=False),
            posix_tier(tmp_path, "object"),
        ],
        api={"listen": "127.0.0.1:0", "tokens": tokens},
    )
    ids = {
        ("demo", 1): await world.add(1, on=ALL),
        ("demo", 2): await world.add(2, on={"nvme": "verified", "pfs": "verified", "object": "failed"}),
        ("demo", 3): await world.add(3, on={"nvme": "verified", "pfs": "copying"}),
        ("demo", 4): await world.add(4, on={}, state="waiting"),
        ("team/exp", 7): await world.add(7, on={"nvme": "verified"}, run="team/exp"),
        ("other", 5): await world.add(5, on={}, run="other", state="waiting"),
    }
    api = ApiService(create_app(world.service.ctx), "127.0.0.1", 0)
    await api.start()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api.port}") as client:
        yield Served(world, client, ids)
    await api.stop(5)


async def test_runs_list_newest_complete_step_overall_and_per_tier(served: Served) -> None:
    answer = await served.get("/v1/runs")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "items": [
            {
                "run": "demo",
                "checkpoints": 4,
                "newest_step": 3,
                "newest_checkpoint_id": served.ids["demo", 3],
                "tiers": {
                    "nvme": {"newest_verified_step": 3},
                    "pfs": {"newest_verified_step": 2},
                    "object": {"newest_verified_step": 1},
                },
            },
            {
                "run": "other",
                "checkpoints": 1,
                "newest_step": None,
                "newest_checkpoint_id": None,
                "tiers": {t: {"newest_verified_step": None} for t in ("nvme", "pfs", "object")},
            },
            {
                "run": "team/exp",
                "checkpoints": 1,
                "newest_step": 7,
                "newest_checkpoint_id": served.ids["team/exp", 7],
                "tiers": {
                    "nvme": {"newest_verified_step": 7},
                    "pfs": {"newest_verified_step": None},
                    "object": {"newest_verified_step": None},
                },
            },
        ]
    }


@pytest.mark.parametrize(
    ("params", "step"),
    [
        ({}, 3),
        ({"tier": "nvme"}, 3),
        ({"tier": "pfs"}, 2),
        ({"tier": "object"}, 1),
        ({"durable": "true"}, 1),
        ({"durable": "false", "tier": "pfs"}, 2),
        ({"tier": "object", "durable": "true"}, 1),
    ],
)
async def test_latest_is_the_newest_complete_step_that_qualifies(
    served: Served, params: dict[str, str], step: int
) -> None:
    answer = await served.get("/v1/runs/demo/latest", **params)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["id"], body["run"], body["step"], body["state"]) == (
        served.ids["demo", step],
        "demo",
        step,
        "complete",
    )
    assert {r["tier"] for r in body["replicas"]} >= {"nvme"}


async def test_latest_of_a_run_whose_name_holds_a_slash(served: Served) -> None:
    answer = await served.get("/v1/runs/team%2Fexp/latest")
    assert answer.status_code == 200, answer.text
    assert (answer.json()["run"], answer.json()["step"]) == ("team/exp", 7)


@pytest.mark.parametrize(
    ("path", "params", "detail"),
    [
        ("/v1/runs/nobody/latest", {}, "no run named 'nobody'"),
        ("/v1/runs/other/latest", {}, "run 'other' has no complete step"),
        ("/v1/runs/team%2Fexp/latest", {"durable": "true"}, "has no complete step verified on object"),
        ("/v1/runs/demo/latest", {"tier": "tape"}, "no tier named 'tape'"),
        ("/v1/runs/demo/latest", {"tier": "pfs", "durable": "true"}, "tier 'pfs' is not durable"),
    ],
)
async def test_latest_answers_404_when_nothing_qualifies(
    served: Served, path: str, params: dict[str, str], detail: str
) -> None:
    answer = await served.get(path, **params)
    assert answer.status_code == 404
    assert answer.headers["content-type"] == PROBLEM
    assert detail in answer.json()["detail"]


async def test_runs_need_the_read_role(served: Served) -> None:
    for path in ("/v1/runs", "/v1/runs/demo/latest"):
        anonymous = await served.client.get(path)
        assert anonymous.status_code == 401
        assert anonymous.headers["content-type"] == PROBLEM
