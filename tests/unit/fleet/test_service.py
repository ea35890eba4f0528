"""FleetService in one process: heartbeats, the election, audit and metrics (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from tests.conftest import posix_config_dict
from tests.fixtures.postgres import PostgresServer
from tests.unit.fleet.test_election import allow_connections
from tierd.config import Config, FleetSettings, load_config
from tierd.daemon.catalog import fleet
from tierd.daemon.catalog.audit import list_events
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.migrate import upgrade
from tierd.daemon.context import Context
from tierd.daemon.fleet.service import FleetService
from tierd.daemon.retention.service import RetentionService
from tierd.errors import ConfigError

FLEET = {"heartbeat_interval": 30, "lease": 60, "node_timeout": 120}


def make_ctx(tmp_path: Path, db: Database, node: str, **fleet_settings: Any) -> Context:
    data = posix_config_dict(tmp_path, catalog={"url": db.url}, node=node, fleet={**FLEET, **fleet_settings})
    return Context(config=Config(**data), db=db)


def service(ctx: Context) -> FleetService:
    return FleetService(ctx, lambda: f"127.0.0.1:{8470 + len(ctx.config.node)}")


def metric(ctx: Context, name: str, **labels: str) -> float | None:
    return ctx.metrics.registry.get_sample_value(name, labels)


def actions(db: Database) -> list[tuple[str, str, int]]:
    with db.read_session() as s:
        return [
            (e.action, e.actor, e.detail["term"]) for e in list_events(s) if e.action.startswith("leader")
        ]


async def test_a_daemon_registers_heartbeats_and_leads_then_hands_over_when_it_stops(
    tmp_path: Path, db: Database
) -> None:
    ctx = make_ctx(tmp_path, db, "node-a")
    fleet_service = service(ctx)
    await fleet_service.start()
    try:
        assert ctx.leader
        assert ctx.acts_on("pfs")
        with db.read_session() as s:
            (row,) = fleet.list_nodes(s)
        assert (row.name, row.api, row.version) == ("node-a", "127.0.0.1:8476", row.version)
        assert row.age_seconds < FLEET["node_timeout"]
        await fleet_service.beat()
        with db.read_session() as s:
            assert fleet.list_nodes(s)[0].heartbeat_at >= row.heartbeat_at
        assert metric(ctx, "tierd_fleet_leader") == 1
        assert metric(ctx, "tierd_fleet_nodes", state="live") == 1
        assert metric(ctx, "tierd_fleet_nodes", state="silent") == 0
    finally:
        await fleet_service.stop(5)
    if db.is_sqlite:
        assert actions(db) == []  # alone: it always leads, nothing is elected
        assert ctx.leader
    else:
        assert actions(db) == [
            ("leader_elected", fleet_service.owner, 1),
            ("leader_stood_down", fleet_service.owner, 1),
        ]
        assert not ctx.leader
        assert not ctx.acts_on("pfs")
        assert ctx.acts_on("nvme")
        assert metric(ctx, "tierd_fleet_leader") == 0


async def test_of_two_daemons_one_leads_and_the_other_takes_over_when_it_stops(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    db = Database(postgres_server.new_database())
    upgrade(db)
    a, b = make_ctx(tmp_path, db, "node-a"), make_ctx(tmp_path, db, "node-b")
    first, second = service(a), service(b)
    b.retention = RetentionService(b, {})  # not started: only its wake-up is looked at
    try:
        await first.start()
        await second.start()
        assert (a.leader, b.leader) == (True, False)
        assert (a.acts_on("nvme"), b.acts_on("nvme")) == (True, True)  # node-local: every daemon's own
        assert metric(b, "tierd_fleet_leader") == 0
        assert metric(a, "tierd_fleet_nodes", state="live") == 2
        assert metric(b, "tierd_fleet_nodes", state="live") is None  # the fleet's count: the leader's alone
        assert not b.retention.loop.wakeup.is_set()
        await first.stop(5)
        await second.beat()
        assert (a.leader, b.leader) == (False, True)
        assert metric(a, "tierd_fleet_nodes", state="live") is None
        assert metric(b, "tierd_fleet_nodes", state="live") == 2  # a's last heartbeat is recent
        assert b.retention.loop.wakeup.is_set()  # the new leader plans the shared tiers at once
        assert [(action, term) for action, _, term in actions(db)] == [
            ("leader_elected", 1),
            ("leader_stood_down", 1),
            ("leader_elected", 2),
        ]
    finally:
        await second.stop(5)
        db.dispose()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"lease": 5, "heartbeat_interval": 3}, "fleet: lease: 5s must be at least twice heartbeat_interval"),
        ({"node_timeout": 1, "lease": 2}, "fleet: node_timeout: 1s must be at least the lease"),
        ({"lease": "soon"}, "fleet.lease: "),
        ({"beat": 1}, "fleet.beat: unknown key"),
    ],
)
def test_fleet_settings_that_cannot_work_are_refused_naming_the_key(
    tmp_path: Path, bad: dict[str, object], message: str
) -> None:
    path = tmp_path / "tierd.yaml"
    data = posix_config_dict(tmp_path, fleet={"heartbeat_interval": 1, **bad})
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert message in str(caught.value)


def test_fleet_settings_default_and_take_durations(tmp_path: Path) -> None:
    assert Config(**posix_config_dict(tmp_path)).fleet == FleetSettings(
        heartbeat_interval=5, lease=15, node_timeout=60
    )
    custom = Config(**posix_config_dict(tmp_path, fleet={"heartbeat_interval": "2s", "lease": "1m"}))
    assert (custom.fleet.heartbeat_interval, custom.fleet.lease, custom.fleet.node_timeout) == (2, 60, 60)


async def test_a_leader_cut_off_from_the_catalog_stands_down_and_audits_it_once_back(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    db = Database(postgres_server.new_database())
    upgrade(db)
    ctx = make_ctx(tmp_path, db, "node-a")
    fleet_service = service(ctx)
    admin = Database(postgres_server.url("postgres"))
    await fleet_service.start()
    try:
        assert ctx.leader
        allow_connections(admin, db, allow=False)
        with capture_logs() as logs:
            await fleet_service.beat()
        assert not ctx.leader
        assert metric(ctx, "tierd_fleet_leader") == 0
        assert {"leader_stood_down", "fleet_heartbeat_failed"} <= {e["event"] for e in logs}
        allow_connections(admin, db, allow=True)
        await fleet_service.beat()
        assert ctx.leader
        assert metric(ctx, "tierd_fleet_leader") == 1
        with db.read_session() as s:
            events = [(e.action, e.reason) for e in list_events(s) if e.action.startswith("leader")]
        assert [action for action, _ in events] == ["leader_elected", "leader_stood_down", "leader_elected"]
        assert events[1][1].startswith("the catalog failed")
        assert events[2][1] == "renewed its own lease after standing down"  # nobody took it meanwhile
    finally:
        allow_connections(admin, db, allow=True)
        await fleet_service.stop(5)
        admin.dispose()
        db.dispose()
