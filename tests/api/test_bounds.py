"""Every list and string a request can make the daemon build is bounded, over real HTTP.

Each refusal is a 422 problem+json whose detail names the field; each is sent as a hostile
job would send it (the huge number, the long name, the control character).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from sqlalchemy import update

from tests.fixtures.world import World, served_world
from tierd.api.bounds import MAX_EXPECTED_FILES, MAX_WORLD_SIZE
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint

TOKENS = {"operate": "o-token"}
AUTH = {"Authorization": "Bearer o-token"}
JSON_AUTH = {**AUTH, "Content-Type": "application/json"}
PROBLEM = "application/problem+json"
#: C0 (newline, ESC), DEL and a C1 control (CSI, which some terminals take as ESC [).
CONTROLS = ["\n", "\x1b", "\x7f", "\x9b"]


@dataclass
class Served:
    world: World
    client: httpx.AsyncClient

    async def notify(self, **fields: Any) -> httpx.Response:
        body = {"run": "demo", "step": 1, "path": "demo/step_1", **fields}
        return await self.client.post("/v1/checkpoints", json=body, headers=AUTH)


@pytest.fixture
async def served(tmp_path: Path, sqlite_db: Database) -> AsyncIterator[Served]:
    async with (
        served_world(tmp_path, sqlite_db, TOKENS) as (world, url),
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        yield Served(world, client)


def refused(response: httpx.Response, field: str) -> str:
    """The detail of a 422 problem that names ``field``."""
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == PROBLEM
    detail: str = response.json()["detail"]
    assert field in detail, detail
    return detail


async def test_a_world_size_past_the_bound_is_refused(served: Served) -> None:
    detail = refused(await served.notify(world_size=2**31 - 1), "body.world_size")
    assert str(MAX_WORLD_SIZE) in detail
    refused(await served.notify(world_size=MAX_WORLD_SIZE + 1), "body.world_size")


async def test_the_largest_world_size_is_taken_and_its_missing_ranks_counted(served: Served) -> None:
    step = served.world.tier_path("nvme", "demo/step_1")
    step.mkdir(parents=True)
    (step / "__0_0.distcp").write_bytes(b"rank 0")
    os.utime(step / "__0_0.distcp", (time.time() - 60, time.time() - 60))  # settled
    answer = await served.notify(format="dcp", world_size=MAX_WORLD_SIZE)
    assert answer.status_code == 202, answer.text
    missing = answer.json()["missing"]
    assert (missing["rank_count"], len(missing["ranks"])) == (MAX_WORLD_SIZE - 1, 1000)


async def test_a_waiting_step_with_a_huge_world_size_in_the_catalog_is_listed(served: Served) -> None:
    """A row written before the bound (2**31 - 1 ranks) no longer makes the list answer 500."""
    cid = await served.world.add(1, on={"nvme": "verified"}, state="waiting")
    with served.world.db.session() as session:
        session.execute(update(Checkpoint).where(Checkpoint.id == cid).values(expected_ranks=2**31 - 1))
    listed = await served.client.get("/v1/checkpoints", headers=AUTH)
    assert listed.status_code == 200, listed.text
    missing = listed.json()["items"][0]["missing"]
    assert (missing["rank_count"], len(missing["ranks"])) == (2**31 - 1, 1000)


async def test_expected_files_are_bounded_in_count_and_each_path(served: Served) -> None:
    too_many = [f"f{i}" for i in range(MAX_EXPECTED_FILES + 1)]
    refused(await served.notify(expected_files=too_many), "body.expected_files")
    for path, why in [
        ("a/" * 2048 + "b", "at most 4096"),
        ("é" * 2049, "4098 bytes"),  # 2049 characters: the bound is in bytes, as PATH_MAX is
        ("d/" + "x" * 256, "256-byte component"),
        ("../../etc/shadow", "'..'"),
        ("/etc/shadow", "relative"),
        ("a//b", "relative"),
    ]:
        detail = refused(await served.notify(expected_files=["ok.distcp", path]), "body.expected_files.1")
        assert why in detail


async def test_names_and_paths_are_bounded(served: Served) -> None:
    refused(await served.notify(run="r" * 256), "body.run")
    surrogate = b'{"run": "demo\\ud800", "step": 1, "path": "demo/step_1"}'  # escaped, as JSON allows
    sent = await served.client.post("/v1/checkpoints", content=surrogate, headers=JSON_AUTH)
    refused(sent, "body.run")  # pydantic's own: no lone surrogate is text
    refused(await served.notify(path="p" * 4097), "body.path")
    refused(await served.notify(path="p/" + "q" * 256), "body.path")
    refused(await served.notify(metrics={"m" * 129: 1.0}), "body.metrics")
    long_run = await served.client.get("/v1/checkpoints", params={"run": "r" * 256}, headers=AUTH)
    refused(long_run, "query.run")


@pytest.mark.parametrize("control", CONTROLS, ids=["newline", "esc", "del", "csi"])
async def test_control_characters_are_refused_in_every_name(served: Served, control: str) -> None:
    name = f"demo{control}[31mforged"
    detail = refused(await served.notify(run=name), "body.run")
    assert f"U+{ord(control):04X}" in detail
    refused(await served.notify(path=f"demo/{name}"), "body.path")
    refused(await served.notify(expected_files=[f"x{control}y"]), "body.expected_files.0")
    refused(await served.notify(metrics={name: 1.0}), "body.metrics")
    for params, where in [({"run": name}, "/v1/checkpoints"), ({"tier": name}, "/v1/retention/plan")]:
        refused(await served.client.get(where, params=params, headers=AUTH), f"query.{next(iter(params))}")
    latest = await served.client.get(f"/v1/runs/{quote(name, safe='')}/latest", headers=AUTH)
    if control == "\n":  # no route matches a path holding a newline
        assert (latest.status_code, latest.headers["content-type"]) == (404, PROBLEM)
    else:
        refused(latest, "path.run")
    restore = {"run": name, "latest": True, "target": "/tmp/x"}
    refused(await served.client.post("/v1/restores", json=restore, headers=AUTH), "body.run")
    restore = {"run": "demo", "latest": True, "target": f"/tmp/{name}"}
    refused(await served.client.post("/v1/restores", json=restore, headers=AUTH), "body.target")
    cid = await served.world.add(1, on={"nvme": "verified"})
    pin = await served.client.put(f"/v1/checkpoints/{cid}/pin", json={"reason": name}, headers=AUTH)
    refused(pin, "body.reason")
    unpin = await served.client.delete(f"/v1/checkpoints/{cid}/pin", params={"reason": name}, headers=AUTH)
    refused(unpin, "query.reason")


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/checkpoints?limit=1000000000000000000000000000000", "query.limit"),
        ("/v1/checkpoints?offset=1000000000000000000000000000000", "query.offset"),
        ("/v1/checkpoints?limit=0", "query.limit"),
        ("/v1/audit?limit=1000000000000000000000000000000", "query.limit"),
        ("/v1/audit?before=1000000000000000000000000000000", "query.before"),
        ("/v1/restores?limit=1000000000000000000000000000000", "query.limit"),
        ("/v1/checkpoints/1000000000000000000000000000000", "path.checkpoint_id"),
    ],
)
async def test_huge_numbers_in_the_query_are_refused(served: Served, path: str, field: str) -> None:
    refused(await served.client.get(path, headers=AUTH), field)
