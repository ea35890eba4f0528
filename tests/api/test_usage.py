"""``GET /v1/usage`` over real HTTP, on SQLite and PostgreSQL: roles, shape, bounds, the CLI's table."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from tests.fixtures.world import World, posix_tier
from tierd.api.app import create_app
from tierd.api.server import ApiService
from tierd.cli.usage import usage_lines
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint

READ = {"Authorization": "Bearer r-token"}
PROBLEM = "application/problem+json"
GIB = 1 << 30


@dataclass
class Served:
    world: World
    client: httpx.AsyncClient

    async def get(self, **params: Any) -> httpx.Response:
        return await self.client.get("/v1/usage", params=params, headers=READ)


@pytest.fixture
async def served(tmp_path: Path, db: Database) -> AsyncIterator[Served]:
    """nvme (not priced) and object (0.02 per GiB-month, 0.005 per 1,000 writes); runs big and small.

    big: steps 1 and 2 of 2 GiB each, on both tiers; small: step 3 of 1 GiB, on nvme only.
    Saved in January: no run saved within the cadence window, so nothing is projected to grow.
    """
    tokens = [{"name": "viewer", "token": "r-token", "role": "read"}]
    priced = posix_tier(tmp_path, "object", price_per_gb_month="0.02", price_per_1000_writes="0.005")
    world = World.make(
        tmp_path, db, [posix_tier(tmp_path, "nvme"), priced], api={"listen": "127.0.0.1:0", "tokens": tokens}
    )
    both = {"nvme": "verified", "object": "verified"}
    sizes = {
        await world.add(1, on=both, run="big"): 2 * GIB,
        await world.add(2, on=both, run="big"): 2 * GIB,
        await world.add(3, on={"nvme": "verified", "object": "copying"}, run="small"): GIB,
    }
    with db.session() as s:
        for checkpoint_id, size in sizes.items():
            s.execute(update(Checkpoint).where(Checkpoint.id == checkpoint_id).values(total_bytes=size))
    api = ApiService(create_app(world.service.ctx), "127.0.0.1", 0)
    await api.start()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api.port}") as client:
        yield Served(world, client)
    await api.stop(5)


async def test_usage_shows_bytes_and_cost_per_tier_class_and_run(served: Served) -> None:
    answer = await served.get()
    assert answer.status_code == 200, answer.text
    body = answer.json()
    nvme, priced = body["tiers"]
    assert (nvme["name"], nvme["bytes"], nvme["checkpoints"], nvme["cost_per_month"]) == (
        "nvme",
        5 * GIB,
        3,
        None,
    )
    assert (priced["bytes"], priced["storage_class"], priced["price_per_gb_month"]) == (
        4 * GIB,
        "default",
        0.02,
    )
    assert priced["storage_cost_per_month"] == 0.08
    assert (priced["writes_per_month"], priced["request_cost_per_month"]) == (0, 0.0)
    assert priced["cost_per_month"] == 0.08
    assert (priced["projected_bytes"], priced["projected_cost_per_month"]) == (4 * GIB, 0.08)
    assert body["totals"] == {
        "bytes": 9 * GIB,
        "cost_per_month": 0.08,
        "retention_deleted_bytes": 0,
        "retention_saved_per_month": 0.0,
        "projected_bytes": 9 * GIB,
        "projected_cost_per_month": 0.08,
        "unpriced": ["nvme"],
    }
    assert body["storage_classes"] == [
        {"storage_class": "default", "tiers": ["nvme", "object"], "bytes": 9 * GIB, "cost_per_month": 0.08}
    ]
    assert [(r["run"], r["bytes"], r["tiers"], r["steps_per_day"]) for r in body["runs"]] == [
        ("big", 8 * GIB, {"nvme": 4 * GIB, "object": 4 * GIB}, None),
        ("small", GIB, {"nvme": GIB}, None),
    ]
    assert (body["runs_total"], body["cadence_days"], body["projection_days"]) == (2, 7, 30)


async def test_the_runs_listed_are_bounded_by_the_query(served: Served) -> None:
    body = (await served.get(runs=1, cadence_days=30)).json()
    assert [r["run"] for r in body["runs"]] == ["big"]
    assert (body["runs_total"], body["cadence_days"]) == (2, 30)


@pytest.mark.parametrize(
    ("params", "field"),
    [({"cadence_days": 0}, "cadence_days"), ({"cadence_days": 91}, "cadence_days"), ({"runs": 1001}, "runs")],
)
async def test_a_bad_query_is_a_problem_naming_the_parameter(
    served: Served, params: dict[str, int], field: str
) -> None:
    answer = await served.get(**params)
    assert answer.status_code == 422
    assert answer.headers["content-type"].startswith(PROBLEM)
    assert field in answer.text


async def test_usage_needs_a_readers_token(served: Served) -> None:
    answer = await served.client.get("/v1/usage")
    assert answer.status_code == 401
    assert answer.headers["content-type"].startswith(PROBLEM)


async def test_the_cli_table_gives_units_and_costs(served: Served) -> None:
    lines = usage_lines((await served.get()).json())
    header = lines[0].split()
    assert header[:4] == ["TIER", "CLASS", "STORED", "COST/MONTH"]
    assert lines[1].split()[:5] == ["nvme", "default", "5.4", "GB", "-"]
    assert lines[2].split()[:5] == ["object", "default", "4.3", "GB", "0.08"]
    assert lines[3].split()[:4] == ["total", "9.7", "GB", "0.08"]
    assert "not priced: nvme (set tiers[].price_per_gb_month)" in lines
    assert any(line.split()[:3] == ["big", "8.6", "GB"] for line in lines)
