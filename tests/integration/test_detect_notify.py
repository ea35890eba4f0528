"""``POST /v1/checkpoints`` over HTTP (httpx against the ASGI app), on SQLite and PostgreSQL."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.unit.detect.helpers import deep_chain
from tests.unit.detect.layouts import LAYOUTS, crc64_b64
from tierd.api.app import create_app
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.context import Context
from tierd.daemon.detect.service import DetectService

DCP = next(layout for layout in LAYOUTS if layout.name == "dcp")
TOKENS = [
    {"name": "job", "token": "op-secret", "role": "operate"},
    {"name": "viewer", "token": "ro-secret", "role": "read"},
]
AUTH = {"Authorization": "Bearer op-secret"}


@pytest.fixture
def ctx(db: Database, make_config: Callable[..., Config]) -> Context:
    return Context(config=make_config(api={"listen": "127.0.0.1:0", "tokens": TOKENS}), db=db)


@pytest.fixture
async def client(ctx: Context) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(ctx))
    async with httpx.AsyncClient(transport=transport, base_url="http://tierd") as c:
        yield c


def _root(ctx: Context) -> Path:
    return ctx.config.watch[0].path


async def _notify(client: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await client.post("/v1/checkpoints", json=body, headers=AUTH)


async def test_complete_step_is_recorded_at_once(client: httpx.AsyncClient, ctx: Context) -> None:
    DCP.uncommitted(_root(ctx), 10)
    DCP.commit(_root(ctx), 10)
    path = str(_root(ctx) / "step_10")
    created = await _notify(client, run="llama", step=10, path=path)
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["run"], body["step"], body["state"], body["format"]) == ("llama", 10, "complete", "dcp")
    assert body["path"] == "demo/step_10"
    assert [r["state"] for r in body["replicas"]] == ["verified", "pending", "pending", "pending"]
    again = await _notify(client, run="llama", step=10, path="demo/step_10")
    assert again.status_code == 200
    assert again.json()["id"] == body["id"]
    detail = (await client.get(f"/v1/checkpoints/{body['id']}", headers=AUTH)).json()
    tier0 = ctx.config.tier0.path.resolve()
    assert {f["path"]: f["checksum"] for f in detail["files"]} == {
        f"demo/step_10/{p.name}": crc64_b64(p) for p in (tier0 / "demo" / "step_10").iterdir()
    }


async def test_detector_disagreeing_makes_it_wait(client: httpx.AsyncClient, ctx: Context) -> None:
    DCP.uncommitted(_root(ctx), 20)
    waiting = await _notify(client, run="llama", step=20, path="demo/step_20", format="dcp")
    assert waiting.status_code == 202, waiting.text
    body = waiting.json()
    assert (body["state"], body["replicas"]) == ("waiting", [])
    assert (await _notify(client, run="llama", step=20, path="demo/step_20")).status_code == 202

    service = DetectService(ctx)
    await service.reconcile()
    detail = (await client.get(f"/v1/checkpoints/{body['id']}", headers=AUTH)).json()
    assert detail["state"] == "waiting"

    DCP.commit(_root(ctx), 20)
    await service.reconcile()  # the watcher completes the waiting row, under the notified name
    detail = (await client.get(f"/v1/checkpoints/{body['id']}", headers=AUTH)).json()
    assert (detail["state"], detail["run"], detail["step"]) == ("complete", "llama", 20)
    assert len(detail["files"]) == 2
    assert len(detail["replicas"]) == 4
    page = (await client.get("/v1/checkpoints", headers=AUTH)).json()
    assert page["total"] == 1


async def test_unknown_layout_is_recorded_with_every_file(client: httpx.AsyncClient, ctx: Context) -> None:
    directory = _root(ctx) / "custom" / "s5"
    directory.mkdir(parents=True)
    (directory / "weights.bin").write_bytes(os.urandom(4096))
    (directory / "meta.yaml").write_text("step: 5\n")
    created = await _notify(client, run="custom", step=5, path=str(directory))
    assert created.status_code == 201, created.text
    assert (created.json()["format"], created.json()["file_count"]) == ("unknown", 2)


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/etc", "not inside"),
        ("../../../etc/passwd", "not inside"),
        ("demo/nothing-here", "does not exist"),
        (".", "not inside"),
    ],
)
async def test_bad_paths_are_422_problems(client: httpx.AsyncClient, path: str, why: str) -> None:
    response = await _notify(client, run="r", step=1, path=path)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert why in response.json()["detail"]


@pytest.mark.parametrize(
    ("path", "why"),
    [("a" * 300, "has a 300-byte component"), ("demo/a\x00b", "holds a control character (U+0000")],
    ids=["name-too-long", "nul"],
)
async def test_paths_no_file_system_can_look_up_are_422(
    client: httpx.AsyncClient, ctx: Context, path: str, why: str
) -> None:
    """Refused by the body's schema, before the path is looked up."""
    _root(ctx).mkdir(parents=True)
    response = await _notify(client, run="r", step=1, path=path)
    assert response.status_code == 422
    assert f"body.path: {why}" in response.json()["detail"]


async def test_a_symlink_in_tier0_is_refused_never_followed_to_another_step(
    client: httpx.AsyncClient, ctx: Context
) -> None:
    """A job's link to another run's step was resolved, and recorded (and later deleted) as its own."""
    DCP.uncommitted(_root(ctx), 30)
    DCP.commit(_root(ctx), 30)
    tier0 = ctx.config.tier0.path
    (tier0 / "mine").mkdir()
    (tier0 / "mine" / "step_30").symlink_to(_root(ctx) / "step_30")
    (tier0 / "alias").symlink_to(_root(ctx))
    refused = {
        "mine/step_30": "is a symlink",
        str(tier0 / "mine" / "step_30"): "is a symlink",
        "alias/step_30": "goes through a symlink",
        "mine/step_30/.metadata": "goes through a symlink",
    }
    for path, why in refused.items():
        response = await _notify(client, run="thief", step=30, path=path)
        assert response.status_code == 422, path
        assert why in response.json()["detail"], path
    assert (await client.get("/v1/checkpoints", headers=AUTH)).json()["total"] == 0


async def test_the_root_as_the_job_knows_it_through_a_symlink_above_it(
    client: httpx.AsyncClient, ctx: Context, tmp_path: Path
) -> None:
    """``/scratch -> /mnt/nvme/scratch``: only what lies above the root is resolved."""
    DCP.uncommitted(_root(ctx), 40)
    DCP.commit(_root(ctx), 40)
    (tmp_path / "scratch").symlink_to(ctx.config.tier0.path)
    created = await _notify(client, run="llama", step=40, path=str(tmp_path / "scratch" / "demo" / "step_40"))
    assert created.status_code == 201, created.text
    assert created.json()["path"] == "demo/step_40"


async def test_malformed_body_is_422(client: httpx.AsyncClient) -> None:
    response = await _notify(client, run="r", step=-1, path="x", format="zip")
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")


@pytest.mark.parametrize(
    ("run", "step"), [("r", 2**63), ("r\x00", 1)], ids=["step-past-bigint", "nul-in-run"]
)
async def test_what_the_catalog_cannot_hold_is_422(
    client: httpx.AsyncClient, ctx: Context, run: str, step: int
) -> None:
    DCP.uncommitted(_root(ctx), 1)
    DCP.commit(_root(ctx), 1)
    response = await _notify(client, run=run, step=step, path="demo/step_1")
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"


async def test_operate_role_is_required(client: httpx.AsyncClient, ctx: Context) -> None:
    DCP.uncommitted(_root(ctx), 1)
    DCP.commit(_root(ctx), 1)
    body = {"run": "r", "step": 1, "path": "demo/step_1"}
    assert (await client.post("/v1/checkpoints", json=body)).status_code == 401
    read_only = {"Authorization": "Bearer ro-secret"}
    assert (await client.post("/v1/checkpoints", json=body, headers=read_only)).status_code == 403
    assert (await client.post("/v1/checkpoints", json=body, headers=AUTH)).status_code == 201


async def test_hostile_checkpoint_is_refused_and_audited(client: httpx.AsyncClient, ctx: Context) -> None:
    DCP.uncommitted(_root(ctx), 30)
    DCP.commit(_root(ctx), 30)
    os.mkfifo(_root(ctx) / "step_30" / "pipe")
    refused = await _notify(client, run="llama", step=30, path="demo/step_30")
    assert refused.status_code == 422
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert "demo/step_30/pipe (FIFO)" in refused.json()["detail"]
    page = (await client.get("/v1/audit", headers=AUTH)).json()
    (event,) = [e for e in page["items"] if e["action"] == "refused"]
    expected = ("api:job", None, refused.json()["detail"])
    assert (event["actor"], event["checkpoint_id"], event["reason"]) == expected
    assert event["detail"]["offending"] == [{"path": "demo/step_30/pipe", "kind": "FIFO"}]
    assert (await client.get("/v1/checkpoints", headers=AUTH)).json()["total"] == 0


async def test_a_step_deeper_than_path_max_is_a_422(client: httpx.AsyncClient, ctx: Context) -> None:
    """Issue 23, item 7: a tree no whole path reaches fails its own step (this notify), no 500."""
    DCP.uncommitted(_root(ctx), 50)
    DCP.commit(_root(ctx), 50)
    with deep_chain(_root(ctx) / "step_50"):
        response = await _notify(client, run="llama", step=50, path="demo/step_50")
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    detail = response.json()["detail"]
    assert detail.startswith("path 'demo/step_50' cannot be read: a path below is 4096 bytes or longer")
    assert "(ENAMETOOLONG) at ddd" in detail
    assert (await client.get("/v1/checkpoints", headers=AUTH)).json()["total"] == 0


async def test_a_notify_that_records_nothing_adds_no_run(client: httpx.AsyncClient, ctx: Context) -> None:
    """A run row exists only for a run with a step recorded under it (issue 23, item 11)."""
    DCP.uncommitted(_root(ctx), 40)
    DCP.commit(_root(ctx), 40)
    assert (await _notify(client, run="llama", step=40, path="demo/step_40")).status_code == 201
    runs_before = (await client.get("/v1/runs", headers=AUTH)).json()
    same_path = await _notify(client, run="someone-else", step=7, path="demo/step_40")
    assert same_path.status_code == 200, same_path.text  # the step already recorded at that path
    assert (same_path.json()["run"], same_path.json()["step"]) == ("llama", 40)
    DCP.uncommitted(_root(ctx), 41)
    DCP.commit(_root(ctx), 41)
    os.mkfifo(_root(ctx) / "step_41" / "pipe")
    assert (await _notify(client, run="refused", step=41, path="demo/step_41")).status_code == 422
    assert (await client.get("/v1/runs", headers=AUTH)).json() == runs_before
