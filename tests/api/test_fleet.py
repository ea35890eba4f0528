"""``GET /v1/fleet`` over real HTTP: roles, shapes, the leader, running jobs and a silent node."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select, text

from tests.conftest import posix_config_dict
from tierd.api.app import create_app
from tierd.api.server import ApiService
from tierd.cli.fleet import fleet_lines
from tierd.config import Config
from tierd.daemon.catalog import fleet
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, Job, JobKind, JobState, Part, PartReplica, Run, utcnow
from tierd.daemon.context import Context
from tierd.daemon.fleet.service import FleetService

READ = {"Authorization": "Bearer r-token"}
PROBLEM = "application/problem+json"


@dataclass
class Served:
    client: httpx.AsyncClient
    service: FleetService
    db: Database


@pytest.fixture
async def served(tmp_path: Path, pg_db: Database) -> AsyncIterator[Served]:
    """Node ``alpha`` (this daemon, leading, copying one step) and ``beta`` (silent for 5 minutes,
    owing a copy out of its NVMe), on a copy of the session's migrated PostgreSQL catalog."""
    db = pg_db
    tokens = [{"name": "viewer", "token": "r-token", "role": "read"}]
    data = posix_config_dict(
        tmp_path, catalog={"url": db.url}, node="alpha", api={"listen": "127.0.0.1:0", "tokens": tokens}
    )
    ctx = Context(config=Config(**data), db=db)
    api = ApiService(create_app(ctx), "127.0.0.1", 0)
    service = FleetService(ctx, lambda: f"127.0.0.1:{api.port}")
    await service.start()
    _seed(db, service.owner)
    await api.start()
    client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{api.port}")
    try:
        yield Served(client, service, db)
    finally:
        await client.aclose()
        await api.stop(5)
        await service.stop(5)
        db.dispose()


def _seed(db: Database, alpha: str) -> None:
    with db.session() as s:
        fleet.register_node(s, "beta", version="0.9", pid=4242, api="10.0.0.2:8470")
        s.execute(text("UPDATE nodes SET heartbeat_at = now() - interval '5 minutes' WHERE name = 'beta'"))
        run = Run(name="demo")
        ours = Checkpoint(run=run, step=1, path="demo/1", format="dcp", node="alpha", created_at=utcnow())
        theirs = Checkpoint(run=run, step=2, path="demo/2", format="dcp", node="beta", created_at=utcnow())
        s.add_all([ours, theirs])
        s.flush()
        s.add_all(
            [
                Job(
                    kind=JobKind.COPY.value,
                    checkpoint_id=ours.id,
                    src_tier="nvme",
                    dst_tier="pfs",
                    state=JobState.RUNNING.value,
                    lease_owner=alpha,
                    detail={},
                ),
                Job(
                    kind=JobKind.COPY.value,
                    checkpoint_id=theirs.id,
                    src_tier="nvme",
                    dst_tier="pfs",
                    state=JobState.QUEUED.value,
                    detail={},
                ),
                Job(
                    kind=JobKind.COPY.value,
                    checkpoint_id=theirs.id,
                    src_tier="pfs",
                    dst_tier="object",
                    state=JobState.RUNNING.value,
                    lease_owner="beta:4242",
                    detail={},
                ),
            ]
        )


async def test_every_node_with_its_heartbeat_leadership_and_jobs(served: Served) -> None:
    response = await served.client.get("/v1/fleet", headers=READ)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["leader"] == "alpha"
    assert body["term"] == 1
    assert body["node_timeout_seconds"] == 60
    alpha, beta = body["nodes"]
    assert (alpha["name"], alpha["leader"], alpha["silent"], alpha["unfinished"]) == (
        "alpha",
        True,
        False,
        None,
    )
    assert alpha["pid"] == served.service.pid
    assert alpha["api"].startswith("127.0.0.1:")
    assert 0 <= alpha["heartbeat_age_seconds"] < 60
    assert [(j["run"], j["step"], j["dst_tier"], j["owner"]) for j in alpha["copying"]] == [
        ("demo", 1, "pfs", served.service.owner)
    ]
    assert (beta["name"], beta["version"], beta["leader"], beta["silent"]) == ("beta", "0.9", False, True)
    assert 300 <= beta["heartbeat_age_seconds"] < 400
    assert [(j["src_tier"], j["dst_tier"]) for j in beta["copying"]] == [("pfs", "object")]  # as last seen
    # What it left: the hop it was running (taken over once its lease expires), and the copy out
    # of its NVMe that nobody else can make.
    left = {(j["src_tier"], j["dst_tier"], j["state"], j["owner"]) for j in beta["unfinished"]["jobs"]}
    assert left == {("nvme", "pfs", "queued", "beta"), ("pfs", "object", "running", "beta:4242")}
    assert beta["unfinished"]["parts"] == []


async def test_a_silent_node_owes_its_parts_and_their_copies(served: Served) -> None:
    """Step 3 spans alpha and beta: beta's part of the complete step is copied by beta only
    (its queued job is beta's, though alpha recorded the step), and beta's part of the waiting
    step 4 is on beta's NVMe alone."""
    with served.db.session() as s:
        run = s.scalars(select(Run).where(Run.name == "demo")).one()
        spans = Checkpoint(run=run, step=3, path="demo/3", format="dcp", node="alpha", created_at=utcnow())
        waiting = Checkpoint(
            run=run, step=4, path="demo/4", format="dcp", node="alpha", state="waiting", created_at=utcnow()
        )
        s.add_all([spans, waiting])
        s.flush()
        parts = {}
        for row in (spans, waiting):
            for node in ("alpha", "beta"):
                part = Part(
                    checkpoint_id=row.id, node=node, file_count=2, total_bytes=10, recorded_at=utcnow()
                )
                s.add(part)
                s.flush()
                parts[(row.step, node)] = part
                for tier in ("nvme", "pfs", "object", "replica"):
                    state = "verified" if tier == "nvme" or (node == "alpha" and tier == "pfs") else "pending"
                    s.add(PartReplica(part_id=part.id, tier=tier, state=state, bytes_done=0))
        s.add(
            Job(
                kind=JobKind.COPY.value,
                checkpoint_id=spans.id,
                part_id=parts[(3, "beta")].id,
                src_tier="nvme",
                dst_tier="pfs",
                state=JobState.QUEUED.value,
                detail={},
            )
        )
    body = (await served.client.get("/v1/fleet", headers=READ)).json()
    alpha, beta = body["nodes"]
    owed = {(j["step"], j["state"], j["owner"]) for j in beta["unfinished"]["jobs"]}
    assert (3, "queued", "beta") in owed
    assert [(p["step"], p["step_state"], p["files"], p["state"]) for p in beta["unfinished"]["parts"]] == [
        (3, "complete", 2, "pending"),
        (4, "waiting", 2, "pending"),
    ]
    assert alpha["unfinished"] is None  # alpha is live: its own parts are its business
    shown = "\n".join(fleet_lines(body))
    assert "beta alone holds its part of demo:4 (2 files, waiting step)" in shown


async def test_a_node_heard_from_again_is_live_and_a_stood_down_leader_is_not_shown_leading(
    served: Served,
) -> None:
    with served.db.session() as s:
        s.execute(text("UPDATE nodes SET heartbeat_at = now() WHERE name = 'beta'"))
    body = (await served.client.get("/v1/fleet", headers=READ)).json()
    beta = body["nodes"][1]
    assert (beta["silent"], beta["unfinished"]) == (False, None)
    await served.service.stop(5)
    body = (await served.client.get("/v1/fleet", headers=READ)).json()
    assert body["leader"] is None
    assert not any(n["leader"] for n in body["nodes"])


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"}])
async def test_reading_the_fleet_needs_a_token(served: Served, headers: dict[str, str]) -> None:
    response = await served.client.get("/v1/fleet", headers=headers)
    assert response.status_code == 401
    assert response.headers["content-type"].startswith(PROBLEM)
    assert response.json()["status"] == 401


async def test_on_sqlite_the_daemon_alone_always_leads(tmp_path: Path, sqlite_db: Database) -> None:
    ctx = Context(
        config=Config(**posix_config_dict(tmp_path, catalog={"url": sqlite_db.url}, node="solo")),
        db=sqlite_db,
    )
    service = FleetService(ctx, lambda: "127.0.0.1:8470")
    await service.start()
    api = ApiService(create_app(ctx), "127.0.0.1", 0)
    await api.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api.port}") as client:
            body = (await client.get("/v1/fleet")).json()
        assert body["leader"] == "solo"
        assert body["lease_expires_at"] is None
        assert [(n["name"], n["leader"], n["silent"]) for n in body["nodes"]] == [("solo", True, False)]
    finally:
        await api.stop(5)
        await service.stop(5)
