"""The lifecycle API over real HTTP: roles, pins, holds, deletion, metrics, plan, tiers, audit."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.world import LATER_DAY, World, served_world
from tierd.daemon.catalog.db import Database

TOKENS = {"read": "r-token", "operate": "o-token", "admin": "a-token"}
BOTH = {"nvme": "verified", "pfs": "verified"}
PROBLEM = "application/problem+json"


@dataclass
class Served:
    world: World
    client: httpx.AsyncClient

    async def call(self, method: str, path: str, role: str | None = "admin", **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {TOKENS[role]}"} if role else {}
        return await self.client.request(method, path, headers=headers, **kw)


@pytest.fixture
async def served(tmp_path: Path, sqlite_db: Database) -> AsyncIterator[Served]:
    async with (
        served_world(tmp_path, sqlite_db, TOKENS) as (world, url),
        httpx.AsyncClient(base_url=url) as client,
    ):
        yield Served(world, client)


MUTATIONS = [
    ("PUT", "/v1/checkpoints/{id}/pin", None, "operate"),
    ("DELETE", "/v1/checkpoints/{id}/pin", None, "operate"),
    ("POST", "/v1/checkpoints/{id}/holds", {"name": "h", "reason": "legal"}, "admin"),
    ("DELETE", "/v1/checkpoints/{id}/holds/h", None, "admin"),
    ("PUT", "/v1/checkpoints/{id}/metrics", {"metrics": {"loss": 1.0}}, "operate"),
    ("DELETE", "/v1/checkpoints/{id}?reason=x", None, "admin"),
    ("POST", "/v1/checkpoints/{id}/undelete", None, "operate"),
    ("POST", "/v1/tiers/nvme/reservations", {"bytes": 1}, "operate"),
]
WEAKER = {"operate": "read", "admin": "operate"}


@pytest.mark.parametrize(("method", "path", "body", "role"), MUTATIONS)
async def test_every_mutation_needs_a_token_and_its_role(
    served: Served, method: str, path: str, body: Any, role: str
) -> None:
    cid = await served.world.add(1, on=BOTH)
    url = path.format(id=cid)
    anonymous = await served.call(method, url, role=None, json=body)
    assert anonymous.status_code == 401
    assert anonymous.headers["content-type"] == PROBLEM
    weaker = await served.call(method, url, role=WEAKER[role], json=body)
    assert weaker.status_code == 403
    assert f"needs {role}" in weaker.json()["detail"]


async def test_pin_hold_and_delete(served: Served) -> None:
    cid = await served.world.add(1, on=BOTH)
    await served.world.add(2, on=BOTH)
    pinned = await served.call("PUT", f"/v1/checkpoints/{cid}/pin", role="operate", json={"reason": "golden"})
    assert pinned.status_code == 200
    assert pinned.json()["pinned"] is True
    refused = await served.call("DELETE", f"/v1/checkpoints/{cid}", params={"reason": "cleanup"})
    assert refused.status_code == 409
    assert "pinned" in refused.json()["detail"]
    await served.call("DELETE", f"/v1/checkpoints/{cid}/pin", role="operate")
    held = await served.call(
        "POST", f"/v1/checkpoints/{cid}/holds", json={"name": "case-9", "reason": "legal"}
    )
    assert held.status_code == 201
    assert [h["name"] for h in held.json()["holds"]] == ["case-9"]
    assert held.json()["holds"][0]["actor"] == "api:admin-bot"
    again = await served.call("POST", f"/v1/checkpoints/{cid}/holds", json={"name": "case-9", "reason": "x"})
    assert again.status_code == 409
    assert again.headers["content-type"] == PROBLEM
    refused = await served.call("DELETE", f"/v1/checkpoints/{cid}", params={"reason": "cleanup"})
    assert refused.status_code == 409
    assert "legal hold" in refused.json()["detail"]
    released = await served.call("DELETE", f"/v1/checkpoints/{cid}/holds/case-9", params={"reason": "closed"})
    assert released.json()["holds"] == []
    deleted = await served.call("DELETE", f"/v1/checkpoints/{cid}", params={"reason": "bad run"})
    assert deleted.status_code == 202
    replicas = {r["tier"]: r for r in deleted.json()["replicas"]}
    assert {r["state"] for r in replicas.values()} == {"deleting"}
    assert replicas["nvme"]["delete_after"] is not None
    assert replicas["nvme"]["delete_reason"].startswith("api: bad run")
    undone = await served.call(
        "POST", f"/v1/checkpoints/{cid}/undelete", role="operate", json={"reason": "oops"}
    )
    assert undone.status_code == 200
    assert undone.json()["pinned"] is True
    assert {r["state"] for r in undone.json()["replicas"]} == {"verified"}
    nothing = await served.call("POST", f"/v1/checkpoints/{cid}/undelete", role="operate")
    assert nothing.status_code == 409


async def test_delete_needs_a_reason_and_unknown_checkpoints_are_404(served: Served) -> None:
    cid = await served.world.add(1, on=BOTH)
    missing = await served.call("DELETE", f"/v1/checkpoints/{cid}")
    assert missing.status_code == 422
    unknown = await served.call("PUT", f"/v1/checkpoints/{cid + 99}/pin")
    assert unknown.status_code == 404
    assert unknown.headers["content-type"] == PROBLEM


async def test_metrics_merge_and_bad_values_are_refused(served: Served) -> None:
    cid = await served.world.add(1, on=BOTH, metrics={"acc": 0.5})
    ok = await served.call("PUT", f"/v1/checkpoints/{cid}/metrics", json={"metrics": {"eval_loss": 1.25}})
    assert ok.json()["metrics"] == {"acc": 0.5, "eval_loss": 1.25}
    for bad in ({"metrics": {"x": "high"}}, {"metrics": {"x": "NaN"}}, {"metrics": {"": 1.0}}, {}):
        refused = await served.call("PUT", f"/v1/checkpoints/{cid}/metrics", json=bad)
        assert refused.status_code == 422, bad


async def test_plan_tiers_reservations_and_audit(served: Served) -> None:
    old = await served.world.add(1, on=BOTH)
    await served.world.add(2, on=BOTH)
    plan = (await served.call("GET", "/v1/retention/plan", role="read")).json()
    nvme = next(t for t in plan["tiers"] if t["tier"] == "nvme")
    verdicts = {i["checkpoint_id"]: i for i in nvme["items"]}
    assert verdicts[old]["action"] == "delete"
    assert verdicts[old]["backing_tier"] == "pfs"
    assert nvme["counts"] == {"keep": 1, "delete": 1, "blocked": 0}
    assert nvme["policy"] == "keep_last"
    only = (await served.call("GET", "/v1/retention/plan?tier=pfs&action=keep", role="read")).json()
    assert [t["tier"] for t in only["tiers"]] == ["pfs"]
    assert {i["action"] for i in only["tiers"][0]["items"]} == {"keep"}

    tiers = (await served.call("GET", "/v1/tiers", role="read")).json()
    assert [t["name"] for t in tiers] == ["nvme", "pfs"]
    assert (tiers[0]["durable"], tiers[1]["durable"]) == (False, True)
    assert tiers[0]["free_bytes"] > 0
    assert tiers[0]["replicas"] == {"verified": 2}

    room = await served.call("POST", "/v1/tiers/nvme/reservations", role="operate", json={"bytes": 1024})
    assert room.status_code == 200
    assert room.json()["evicted"] == []
    huge = await served.call("POST", "/v1/tiers/nvme/reservations", role="operate", json={"bytes": 2**62})
    assert huge.status_code == 409
    assert huge.headers["content-type"] == PROBLEM
    assert huge.json()["blocked"]
    s3 = await served.call("POST", "/v1/tiers/nope/reservations", role="operate", json={"bytes": 1})
    assert s3.status_code == 404

    await served.world.service.run_pass(LATER_DAY)
    page = (await served.call("GET", f"/v1/audit?checkpoint_id={old}&limit=1", role="read")).json()
    assert [e["action"] for e in page["items"]] == ["deletion_scheduled"]
    assert page["items"][0]["actor"] == "retention"
    assert page["next_before"] is None
