"""The access log over real HTTP: one line per request, its route's template, its caller's name."""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from tests.fixtures.world import World, posix_tier
from tierd.api.app import create_app
from tierd.api.server import ApiService
from tierd.daemon.catalog.db import Database

SECRET = "s3cret-job-token"
TOKENS = [{"name": "job-7", "token": SECRET, "role": "operate"}]


async def _serve(tmp_path: Path, db: Database, api: dict[str, Any]) -> AsyncIterator[httpx.AsyncClient]:
    world = World.make(tmp_path, db, [posix_tier(tmp_path, "nvme")], api={"listen": "127.0.0.1:0", **api})
    service = ApiService(create_app(world.service.ctx), "127.0.0.1", 0)
    await service.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.port}") as client:
            yield client
    finally:
        await service.stop(5)


@pytest.fixture
async def logged(tmp_path: Path, sqlite_db: Database) -> AsyncIterator[httpx.AsyncClient]:
    """The API with one ``operate`` token and the access log on."""
    async for client in _serve(tmp_path, sqlite_db, {"tokens": TOKENS, "access_log": True}):
        yield client


def _lines(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == "http_request"]


async def test_each_request_is_one_line_with_its_template_status_and_token_name(
    logged: httpx.AsyncClient,
) -> None:
    auth = {"Authorization": f"Bearer {SECRET}"}
    with capture_logs() as logs:
        assert (await logged.get("/v1/checkpoints/12345", headers=auth)).status_code == 404
        assert (await logged.get("/v1/runs/secret-run/latest", headers=auth)).status_code == 404
        guessed = await logged.get("/v1/checkpoints", headers={"Authorization": "Bearer guess"})
        assert guessed.status_code == 401
        assert (await logged.get("/metrics")).status_code == 200
        assert (await logged.get("/no/such/path", headers=auth)).status_code == 404
    lines = _lines(logs)
    assert [(e["method"], e["path"], e["caller"]) for e in lines] == [
        ("GET", "/v1/checkpoints/{checkpoint_id}", "job-7"),
        ("GET", "/v1/runs/{run:path}/latest", "job-7"),
        ("GET", None, None),  # refused by the gate, before any route ran
        ("GET", "/metrics", None),
        ("GET", None, "job-7"),  # no route: the raw path is never logged
    ]
    assert [e["status"] for e in lines][2:] == [401, 200, 404]
    assert lines[0]["status"] == 404
    assert all(e["log_level"] == "info" and e["duration_seconds"] >= 0 for e in lines)
    text = repr(logs)
    for leaked in (SECRET, "guess", "12345", "secret-run", "/no/such/path"):
        assert leaked not in text


async def test_it_is_off_by_default(tmp_path: Path, sqlite_db: Database) -> None:
    async for client in _serve(tmp_path, sqlite_db, {}):
        with capture_logs() as logs:
            assert (await client.get("/v1/checkpoints")).status_code == 200
        assert _lines(logs) == []


async def test_without_tokens_the_caller_is_anonymous(tmp_path: Path, sqlite_db: Database) -> None:
    async for client in _serve(tmp_path, sqlite_db, {"access_log": True}):
        with capture_logs() as logs:
            assert (await client.post("/v1/checkpoints/1/pin")).status_code == 405
        [line] = _lines(logs)
        assert (line["method"], line["path"], line["status"], line["caller"]) == (
            "POST",
            "/v1/checkpoints/{checkpoint_id}/pin",
            405,
            "anonymous",
        )
