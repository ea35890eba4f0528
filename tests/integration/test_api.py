"""The read API over real HTTP (uvicorn on 127.0.0.1, httpx as the client)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tierd import __version__
from tierd.api.app import create_app
from tierd.api.server import ApiService
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, File, Replica, Run
from tierd.daemon.context import Context


def _seed(db: Database, count: int) -> list[int]:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    ids = []
    with db.session() as s:
        run = Run(name="demo")
        for step in range(count):
            ckpt = Checkpoint(
                run=run,
                step=step * 100,
                path=f"demo/step{step}",
                format="dcp",
                created_at=base + timedelta(hours=step),
            )
            ckpt.files.append(
                File(
                    relpath=f"demo/step{step}/.metadata",
                    size=10,
                    checksum_algo="crc64nvme",
                    checksum="AAAAAAAAAAA=",
                )
            )
            ckpt.replicas.append(Replica(tier="nvme", tier_index=0, state="verified", location="/x"))
            ckpt.replicas.append(Replica(tier="pfs", tier_index=1, state="pending"))
            s.add(ckpt)
            s.flush()
            ids.append(ckpt.id)
    return ids


@pytest.fixture
async def served(
    sqlite_db: Database, make_config: Callable[..., Config]
) -> AsyncIterator[tuple[Context, str]]:
    ctx = Context(config=make_config(), db=sqlite_db, watcher_running=True)
    service = ApiService(create_app(ctx), "127.0.0.1", 0)
    await service.start()
    yield ctx, f"http://127.0.0.1:{service.port}"
    await service.stop(5)


async def test_list_and_detail(served: tuple[Context, str]) -> None:
    ctx, base = served
    ids = _seed(ctx.db, 3)
    async with httpx.AsyncClient(base_url=base) as http:
        page = (await http.get("/v1/checkpoints", params={"limit": 2})).json()
        assert [c["step"] for c in page["items"]] == [200, 100]
        assert (page["total"], page["next_offset"]) == (3, 2)
        first = page["items"][0]
        assert {"id", "run", "step", "state", "path", "replicas"} <= set(first)
        assert [(r["tier"], r["state"]) for r in first["replicas"]] == [
            ("nvme", "verified"),
            ("pfs", "pending"),
        ]
        detail = (await http.get(f"/v1/checkpoints/{ids[0]}")).json()
        assert detail["files"] == [
            {
                "path": "demo/step0/.metadata",
                "size": 10,
                "checksum_algorithm": "crc64nvme",
                "checksum": "AAAAAAAAAAA=",
                "uid": None,
                "gid": None,
                "mode": None,
            }
        ]
        assert detail["directories"] == []
        assert (await http.get("/v1/checkpoints", params={"run": "nope"})).json()["total"] == 0
        spec = (await http.get("/v1/openapi.json")).json()
        assert "/v1/checkpoints" in spec["paths"]


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/v1/checkpoints/999", 404),
        ("/v1/checkpoints/abc", 422),
        ("/v1/checkpoints?limit=0", 422),
        ("/v1/checkpoints?offset=9223372036854775808", 422),
        ("/v1/checkpoints?run=a%00b", 422),
        ("/v1/checkpoints/2147483648", 422),
        ("/v1/nothing", 404),
    ],
)
async def test_errors_are_problem_json(served: tuple[Context, str], path: str, status: int) -> None:
    _, base = served
    async with httpx.AsyncClient(base_url=base) as http:
        response = await http.get(path)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status
    assert body["title"]
    assert body["detail"]


async def test_readyz_reports_each_failing_check(served: tuple[Context, str]) -> None:
    ctx, base = served
    async with httpx.AsyncClient(base_url=base) as http:
        assert (await http.get("/readyz")).status_code == 200
        ctx.watcher_running = False
        ctx.draining = True
        response = await http.get("/readyz")
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["checks"] == ["watcher not running", "draining for shutdown"]


async def test_readyz_fails_when_the_catalog_is_gone(served: tuple[Context, str], tmp_path) -> None:
    ctx, base = served
    ctx.db = Database(f"sqlite:///{tmp_path}")  # a directory: SQLite cannot open it
    async with httpx.AsyncClient(base_url=base) as http:
        response = await http.get("/readyz")
    assert response.status_code == 503
    assert "catalog unreachable" in response.json()["detail"]


async def test_livez_checks_neither_the_catalog_nor_the_watcher(
    served: tuple[Context, str], tmp_path
) -> None:
    """Liveness is the process and its loop: a daemon unready for any reason is still alive."""
    ctx, base = served
    ctx.db = Database(f"sqlite:///{tmp_path}")  # a directory: SQLite cannot open it
    ctx.watcher_running = False
    ctx.draining = True
    async with httpx.AsyncClient(base_url=base) as http:
        assert (await http.get("/readyz")).status_code == 503
        response = await http.get("/livez")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": __version__}


async def test_tokens_guard_the_api(sqlite_db: Database, make_config: Callable[..., Config]) -> None:
    config = make_config(
        api={"listen": "127.0.0.1:0", "tokens": [{"name": "viewer", "token": "v", "role": "read"}]}
    )
    ctx = Context(config=config, db=sqlite_db, watcher_running=True)
    service = ApiService(create_app(ctx), "127.0.0.1", 0)
    await service.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.port}") as http:
            assert (await http.get("/healthz")).status_code == 200
            assert (await http.get("/livez")).status_code == 200
            denied = await http.get("/v1/checkpoints")
            assert denied.status_code == 401
            assert denied.headers["www-authenticate"] == "Bearer"
            assert (
                await http.get("/v1/checkpoints", headers={"Authorization": "Bearer wrong"})
            ).status_code == 401
            ok = await http.get("/v1/checkpoints", headers={"Authorization": "Bearer v"})
            assert ok.status_code == 200
    finally:
        await service.stop(5)
