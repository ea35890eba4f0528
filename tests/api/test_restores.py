"""The restore API over real HTTP: roles, 202 and progress, listing, cancel, every refusal as problem+json."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.world import posix_tier
from tests.unit.restore.harness import Gate, RestoreWorld
from tierd.api.app import create_app
from tierd.api.server import ApiService
from tierd.config import RestoreSettings
from tierd.daemon.catalog.audit import list_events
from tierd.daemon.catalog.db import Database
from tierd.daemon.context import Context
from tierd.daemon.restore.service import RestoreService

TOKENS = {"read": "r-token", "operate": "o-token", "admin": "a-token"}
PROBLEM = "application/problem+json"
STEP = {"__0_0.distcp": os.urandom(50_000), "__1_0.distcp": os.urandom(70_000), ".metadata": b"m" * 99}


@dataclass
class Served:
    lab: RestoreWorld
    client: httpx.AsyncClient
    ctx: Context

    async def call(self, method: str, path: str, role: str = "operate", **kw: Any) -> httpx.Response:
        return await self.client.request(
            method, path, headers={"Authorization": f"Bearer {TOKENS[role]}"}, **kw
        )


@pytest.fixture
async def served(tmp_path: Path, sqlite_db: Database) -> AsyncIterator[Served]:
    tokens = [{"name": f"{role}-bot", "token": token, "role": role} for role, token in TOKENS.items()]
    lab = RestoreWorld.make(
        tmp_path,
        sqlite_db,
        [posix_tier(tmp_path, "nvme"), posix_tier(tmp_path, "pfs")],
        api={"listen": "127.0.0.1:0", "tokens": tokens},
    )
    ctx = Context(config=lab.world.config, db=sqlite_db)
    api = ApiService(create_app(ctx), "127.0.0.1", 0)
    await api.start()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api.port}") as client:
        yield Served(lab, client, ctx)
    await api.stop(5)


async def test_ask_follow_and_list_a_restore(served: Served) -> None:
    cid = await served.lab.add(1, {"nvme": "deleted", "pfs": "verified"}, STEP)
    target = served.lab.root / "restores" / "r1"
    body = {"run": "demo", "step": 1, "target": str(target), "ranks": [1]}
    assert (await served.call("POST", "/v1/restores", role="read", json=body)).status_code == 403
    answer = await served.call("POST", "/v1/restores", json=body)
    assert answer.status_code == 202, answer.text
    queued = answer.json()
    assert queued | {"id": 0, "created_at": "", "updated_at": ""} == {
        "id": 0,
        "state": "queued",
        "checkpoint_id": cid,
        "run": "demo",
        "step": 1,
        "target": str(target),
        "to_tier0": False,
        "node": None,
        "source_tier": None,
        "bytes_done": 0,
        "bytes_total": len(STEP["__1_0.distcp"]) + len(STEP[".metadata"]),
        "files_done": 0,
        "files_total": 2,
        "rate_bytes_per_second": None,
        "eta_seconds": None,
        "error": None,
        "fallbacks": [],
        "read_from": {},
        "created_at": "",
        "updated_at": "",
    }
    await served.lab.runner().run()
    done = (await served.call("GET", f"/v1/restores/{queued['id']}", role="read")).json()
    assert (done["state"], done["source_tier"], done["files_done"]) == ("done", "pfs", 2)
    assert done["read_from"] == {"pfs": 2}
    assert sorted(p.name for p in target.iterdir()) == [".metadata", "__1_0.distcp"]
    listed = (await served.call("GET", "/v1/restores", role="read", params={"state": "done"})).json()
    assert [r["id"] for r in listed["items"]] == [queued["id"]]
    jobs = (await served.call("GET", "/v1/jobs", role="read")).json()
    assert jobs == {"copies": [], "deletions": [], "restores": []}


@asynccontextmanager
async def _gated_service(served: Served, step: int, poll_interval: float) -> AsyncIterator[tuple[int, Gate]]:
    """Step ``step`` on pfs only, and a started RestoreService polling every ``poll_interval``
    whose pfs reads wait at a gate: (the checkpoint's id, the gate), once its first claim ran."""
    cid = await served.lab.add(step, {"nvme": "deleted", "pfs": "verified"}, STEP)
    gate = Gate(served.lab.world.backends["pfs"], free=0)
    options = replace(served.lab.service({}).options, poll_interval=poll_interval)
    service = RestoreService(served.ctx, {**served.lab.world.backends, "pfs": gate}, options=options)
    await service.start()
    try:
        await service.loop.pass_done(0)  # the start's claim found nothing
        yield cid, gate
    finally:
        await service.stop(5)


async def test_a_restore_asked_for_through_the_api_starts_at_once_not_at_a_poll(served: Served) -> None:
    """The route wakes the service: with an hour between its polls the restore still runs now."""
    async with _gated_service(served, 3, poll_interval=3600) as (cid, gate):
        target = served.lab.root / "restores" / "r3"
        answer = await served.call("POST", "/v1/restores", json={"checkpoint_id": cid, "target": str(target)})
        assert answer.status_code == 202, answer.text
        await asyncio.wait_for(gate.reached.wait(), 60)  # claimed and reading
        gate.opened.set()


async def test_a_restore_another_process_queued_is_claimed_at_the_poll(served: Served) -> None:
    """Nothing wakes the service for a row written behind its back: its poll finds it."""
    async with _gated_service(served, 4, poll_interval=0.05) as (cid, gate):
        job_id = served.lab.ask(checkpoint_id=cid, target=str(served.lab.root / "restores" / "r4"))
        await asyncio.wait_for(gate.reached.wait(), 60)
        assert served.lab.row(job_id).job.state == "running"
        gate.opened.set()


async def test_cancel_through_the_api_leaves_nothing(served: Served) -> None:
    cid = await served.lab.add(2, {"nvme": "deleted", "pfs": "verified"}, STEP)
    gate = Gate(served.lab.world.backends["pfs"])
    service = RestoreService(
        served.ctx, {**served.lab.world.backends, "pfs": gate}, options=served.lab.service({}).options
    )
    await service.start()
    target = served.lab.root / "restores" / "r2"
    answer = await served.call("POST", "/v1/restores", json={"checkpoint_id": cid, "target": str(target)})
    assert answer.status_code == 202, answer.text
    await gate.reached.wait()
    jobs = (await served.call("GET", "/v1/jobs", role="read")).json()
    assert [r["state"] for r in jobs["restores"]] == ["running"]
    cancelled = await served.call("DELETE", f"/v1/restores/{answer.json()['id']}", params={"reason": "no"})
    assert (cancelled.status_code, cancelled.json()["state"]) == (200, "cancelled")
    assert not target.exists()
    await service.stop(5)
    again = await served.call("DELETE", f"/v1/restores/{answer.json()['id']}")
    assert again.json()["state"] == "cancelled"


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"checkpoint_id": 999, "target": "{root}/x"}, 404, "does not exist"),
        ({"run": "nope", "latest": True, "target": "{root}/x"}, 404, "does not exist"),
        ({"run": "demo", "step": 7, "target": "{root}/x"}, 404, "no checkpoint at step 7"),
        ({"checkpoint_id": "{gone}", "target": "{root}/x"}, 409, "no verified replica"),
        ({"checkpoint_id": "{cid}", "target": "{tmp}/elsewhere"}, 422, "outside the allowed roots"),
        ({"checkpoint_id": "{cid}", "target": "{root}/../x"}, 422, "'..'"),
        ({"checkpoint_id": "{cid}", "target": "{root}/escape/x"}, 422, "symlink"),
        ({"checkpoint_id": "{cid}", "target": "{root}/busy"}, 422, "not an empty directory"),
        ({"checkpoint_id": "{cid}", "target": "relative"}, 422, "not an absolute path"),
        ({"checkpoint_id": "{cid}", "to": "tier0"}, 422, "not an empty directory"),
        ({"checkpoint_id": "{cid}"}, 422, "exactly one destination"),
        ({"checkpoint_id": "{cid}", "run": "demo", "target": "{root}/x"}, 422, "run goes with"),
        ({"checkpoint_id": "{cid}", "target": "{root}/x", "to": "tier0"}, 422, "exactly one destination"),
        ({"checkpoint_id": "{cid}", "target": "{root}/x", "extra": 1}, 422, "extra"),
    ],
)
async def test_refusals_are_problems(served: Served, body: dict[str, Any], status: int, says: str) -> None:
    cid = await served.lab.add(3, {"nvme": "verified", "pfs": "verified"}, STEP)
    gone = await served.lab.add(4, {"nvme": "deleted", "pfs": "deleted"}, STEP)
    root, tmp = served.lab.root / "restores", served.lab.root
    (root / "busy").mkdir()
    (root / "busy" / "f").write_bytes(b"x")
    (root / "escape").symlink_to(tmp)
    values = {"root": str(root), "tmp": str(tmp), "cid": cid, "gone": gone}
    filled = {k: _fill(v, values) for k, v in body.items()}
    answer = await served.call("POST", "/v1/restores", json=filled)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == PROBLEM
    assert says in answer.json()["detail"]


def _fill(value: Any, values: dict[str, Any]) -> Any:
    if value in ("{cid}", "{gone}"):
        return values[value.strip("{}")]
    return value.format(**values) if isinstance(value, str) else value


async def test_unknown_restores_and_done_ones(served: Served) -> None:
    assert (await served.call("GET", "/v1/restores/5", role="read")).status_code == 404
    assert (await served.call("DELETE", "/v1/restores/5")).status_code == 404
    cid = await served.lab.add(5, {"nvme": "deleted", "pfs": "verified"}, STEP)
    job = served.lab.ask(checkpoint_id=cid, target=str(served.lab.root / "restores" / "d"))
    await served.lab.runner().run()
    answer = await served.call("DELETE", f"/v1/restores/{job}")
    assert (answer.status_code, answer.headers["content-type"]) == (409, PROBLEM)
    assert (await served.call("DELETE", f"/v1/restores/{job}", role="read")).status_code == 403


async def test_giving_the_restored_tree_to_an_owner_needs_the_admin_role(served: Served) -> None:
    """An operate token (a job's) could otherwise hand another user's private checkpoint to itself."""
    cid = await served.lab.add(6, {"nvme": "verified", "pfs": "verified"}, STEP)
    body = {
        "checkpoint_id": cid,
        "target": str(served.lab.root / "restores" / "o"),
        "owner": {"uid": 1234, "gid": 99},
    }
    refused = await served.call("POST", "/v1/restores", json=body)
    assert (refused.status_code, refused.headers["content-type"]) == (403, PROBLEM)
    assert refused.json()["detail"] == (
        "owner: giving a restore to another owner needs the admin role (restore.owner_role); "
        "token 'operate-bot' has operate"
    )
    answer = await served.call("POST", "/v1/restores", role="admin", json=body)
    assert answer.status_code == 202, answer.text
    with served.ctx.db.read_session() as session:
        (event,) = [e for e in list_events(session) if e.action == "restore_requested"]
    assert (event.actor, event.detail["owner"]) == ("api:admin-bot", {"uid": 1234, "gid": 99})

    settings = RestoreSettings(allowed_roots=served.ctx.config.restore.allowed_roots, owner_role="operate")
    served.ctx.config = served.ctx.config.model_copy(update={"restore": settings})
    body["target"] = str(served.lab.root / "restores" / "p")
    assert (await served.call("POST", "/v1/restores", json=body)).status_code == 202


@pytest.mark.parametrize(
    ("owner", "says"),
    [
        ({"uid": -1, "gid": 0}, "owner.uid"),
        ({"uid": 0, "gid": 2**32 - 1}, "owner.gid"),
        ({"uid": 0}, "owner.gid"),
        ({"uid": 0, "gid": 0, "mode": "0777"}, "owner.mode"),
        ({"uid": "root", "gid": 0}, "owner.uid"),
    ],
)
async def test_a_malformed_owner_is_422_naming_the_field(served: Served, owner: Any, says: str) -> None:
    body = {"checkpoint_id": 1, "target": str(served.lab.root / "restores" / "m"), "owner": owner}
    answer = await served.call("POST", "/v1/restores", role="admin", json=body)
    assert (answer.status_code, answer.headers["content-type"]) == (422, PROBLEM)
    assert says in answer.text
