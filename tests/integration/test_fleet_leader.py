"""Three real daemons on one PostgreSQL: one leader for the shared tiers, failover, and fencing.

Each daemon has its own NVMe (node-local, ``keep_last: 1``) and shares ``pfs`` (``keep_last:
1``) and ``object`` (keeps everything). Steps are put straight into the catalog and on disk,
verified on every tier, so the only work is retention's: shared-tier deletions must happen
once each, on the leader, and node-local ones on every node for its own steps. A takeover is
timed on the database's clock (the kill or pause to the lease's ``acquired_at``), not by how
soon this process sees it, so the tests run beside the others.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from tests.fixtures import http
from tests.fixtures.daemon import Daemon
from tests.fixtures.fleet import db_clock, shared_lease
from tests.fixtures.net import free_port
from tests.fixtures.postgres import PostgresServer
from tests.integration.daemon_helpers import (
    audit,
    config_dict,
    record_checkpoint,
    wait_for,
    write_files,
)
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Replica, ReplicaState, utcnow

pytestmark = pytest.mark.slow

LEASE = 4.0
FLEET = {"heartbeat_interval": 0.5, "lease": LEASE, "node_timeout": LEASE}
NODES = ("node-a", "node-b", "node-c")


@dataclass
class Node:
    name: str
    daemon: Daemon
    config: Config
    url: str

    @property
    def pid(self) -> int:
        assert self.daemon.pid is not None
        return self.daemon.pid

    def fleet(self) -> dict[str, Any] | None:
        try:
            return dict(http.get(f"{self.url}/v1/fleet", timeout=2).json())
        except httpx.HTTPError:
            return None

    def logged(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.daemon.events() if e.get("event") == event]


@dataclass
class Fleet:
    root: Path
    db: Database
    nodes: dict[str, Node]
    url: str

    def leader(self, asking: Node) -> str | None:
        view = asking.fleet()
        return view["leader"] if view else None

    def add_step(self, node: Node, run: str, step: int) -> int:
        """A step written on ``node``, verified on its NVMe and on both shared tiers."""
        path = f"{run}/step_{step}"
        write_files(node.config.tier0.path / path, {"__0_0.distcp": 4096, ".metadata": 64}, seed=step)
        for shared in ("pfs", "object"):
            shutil.copytree(node.config.tier0.path / path, self.root / shared / path)
        checkpoint_id = record_checkpoint(self.db, node.config, run, step, path, node=node.name)
        with self.db.session() as s:
            s.execute(
                update(Replica)
                .where(Replica.checkpoint_id == checkpoint_id)
                .values(state=ReplicaState.VERIFIED.value, verified_at=utcnow())
            )
        return checkpoint_id

    def deleted(self, checkpoint_id: int, tier: str) -> list[str]:
        """The actors of the ``deleted`` audit events of a replica."""
        return [
            e.actor
            for e in audit(self.db)
            if e.action == "deleted" and e.checkpoint_id == checkpoint_id and e.tier == tier
        ]

    def acts(self) -> dict[str, list[dict[str, Any]]]:
        """Every node's fenced shared-tier acts (``leader_acts`` log events)."""
        return {name: node.logged("leader_acts") for name, node in self.nodes.items()}


@pytest.fixture
def fleet(tmp_path: Path, postgres_server: PostgresServer) -> Iterator[Fleet]:
    url = postgres_server.new_database()
    nodes: dict[str, Node] = {}
    for name in NODES:
        root = tmp_path / name
        root.mkdir()
        tiers: list[dict[str, Any]] = [
            {"name": "nvme", "kind": "posix", "path": str(root / "nvme"), "retention": {"keep_last": 1}},
            {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs"), "retention": {"keep_last": 1}},
            {"name": "object", "kind": "posix", "path": str(tmp_path / "object")},
        ]
        for tier in tiers[:2]:
            tier["delete_delay"] = 0
        data = config_dict(root, tiers, node=name, catalog={"url": url}, fleet=FLEET)
        data |= {"retention": {"interval": 0.3}, "api": {"listen": f"127.0.0.1:{free_port()}"}}
        daemon = Daemon.prepare(root, data)
        nodes[name] = Node(name, daemon, Config(**data), f"http://{data['api']['listen']}")
    db = Database(url)
    try:
        for node in nodes.values():
            node.daemon.start()
        first = nodes[NODES[0]]
        wait_for(lambda: _all_up(first, len(NODES)), 60, "every daemon in /v1/fleet with a leader", 0.2)
        yield Fleet(tmp_path, db, nodes, url)
    finally:
        for node in nodes.values():
            node.daemon.stop()  # a paused one is resumed first
        db.dispose()


def _all_up(node: Node, count: int) -> bool:
    view = node.fleet()
    return bool(view and view["leader"] and sum(not n["silent"] for n in view["nodes"]) == count)


def _retention_runs_everywhere(fleet: Fleet, run_of: dict[str, str]) -> None:
    """Each node's step 1 goes from its own NVMe (on that node) and from pfs (on the leader), once."""
    ids = {name: [fleet.add_step(fleet.nodes[name], run, s) for s in (1, 2)] for name, run in run_of.items()}
    for name, run in run_of.items():
        nvme = fleet.nodes[name].config.tier0.path
        old, new = ids[name]
        wait_for(functools.partial(_gone_everywhere, fleet, old), 60, f"{run}'s step 1 deleted")
        assert not (nvme / run / "step_1").exists()
        assert (nvme / run / "step_2").exists()
        assert not (fleet.root / "pfs" / run / "step_1").exists()
        assert (fleet.root / "object" / run / "step_1").exists()
        assert len(fleet.deleted(old, "pfs")) == 1
        assert len(fleet.deleted(old, "nvme")) == 1
        assert fleet.deleted(new, "pfs") == []
        assert fleet.deleted(new, "nvme") == []
        # The NVMe deletion ran on the step's own node; nobody else touched it.
        deleting = [n for n, node in fleet.nodes.items() if _deleted_in_log(node, old, "nvme")]
        assert deleting == [name]


def _gone_everywhere(fleet: Fleet, checkpoint_id: int) -> bool:
    return bool(fleet.deleted(checkpoint_id, "pfs") and fleet.deleted(checkpoint_id, "nvme"))


def _deleted_in_log(node: Node, checkpoint_id: int, tier: str) -> bool:
    return any(e["checkpoint"] == checkpoint_id and e["tier"] == tier for e in node.logged("replica_deleted"))


def _shared_acts_by(fleet: Fleet) -> dict[int, list[str]]:
    """checkpoint id -> the nodes that deleted its pfs replica (each fenced act)."""
    out: dict[int, list[str]] = {}
    for name, events in fleet.acts().items():
        for event in events:
            out.setdefault(event["checkpoint"], []).append(name)
    return out


def _silent(asking: Node, name: str) -> dict[str, Any] | None:
    """The fleet as ``asking`` sees it, once it shows node ``name`` silent."""
    view = asking.fleet()
    return view if view and any(n["name"] == name and n["silent"] for n in view["nodes"]) else None


def _new_leader(fleet: Fleet, old: str, asking: Node) -> str | None:
    lead = fleet.leader(asking)
    return lead if lead not in (None, old) else None


def _took_over(fleet: Fleet, old: str, asking: Node, since: datetime) -> tuple[str, float]:
    """The new leader, and the seconds from ``since`` until it took the lease (database clock)."""
    new = wait_for(lambda: _new_leader(fleet, old, asking), 60, "a new leader", 0.05)
    lease = shared_lease(fleet.url)
    assert lease.held_by(new), f"the lease is {lease}, not {new}'s"
    assert lease.acquired_at is not None
    elapsed = (lease.acquired_at - since).total_seconds()
    print(f"{new} took over from {old} after {elapsed:.2f}s (lease {LEASE:g}s)")  # shown with -s
    return new, elapsed


def test_kill_9_the_leader_another_leads_within_twice_the_lease_and_deletes_once(fleet: Fleet) -> None:
    first = fleet.nodes[NODES[0]]
    leader = fleet.leader(first)
    assert leader in NODES
    _retention_runs_everywhere(fleet, {name: f"run-{name}" for name in NODES})
    actors = {name for names in _shared_acts_by(fleet).values() for name in names}
    assert actors == {leader}  # only the leader acted on pfs

    killed_at = db_clock(fleet.url)
    fleet.nodes[leader].daemon.kill()
    asking = next(n for name, n in fleet.nodes.items() if name != leader)
    new, elapsed = _took_over(fleet, leader, asking, killed_at)
    assert elapsed <= 2 * LEASE, f"{new} took over after {elapsed:.2f}s"

    view = wait_for(lambda: _silent(asking, leader), 30, "the killed node shown silent")
    dead = next(n for n in view["nodes"] if n["name"] == leader)
    assert (dead["leader"], dead["unfinished"]) == (False, {"jobs": [], "parts": []})
    assert sum(not n["silent"] for n in view["nodes"]) == 2

    survivors = {name: f"after-{name}" for name in fleet.nodes if name != leader}
    _retention_runs_everywhere(fleet, survivors)
    acts = _shared_acts_by(fleet)
    assert all(len(names) == 1 for names in acts.values()), acts  # each pfs deletion once
    assert {names[0] for cid, names in acts.items()} == {leader, new}


def test_sigstop_the_leader_another_leads_and_the_resumed_one_stands_down_without_acting(
    fleet: Fleet,
) -> None:
    first = fleet.nodes[NODES[0]]
    leader = fleet.leader(first)
    assert leader is not None
    paused = fleet.nodes[leader]
    _retention_runs_everywhere(fleet, {leader: "before"})

    paused_at = db_clock(fleet.url)
    paused.daemon.pause()
    stopped_at = datetime.now(UTC)
    asking = next(n for name, n in fleet.nodes.items() if name != leader)
    new, elapsed = _took_over(fleet, leader, asking, paused_at)
    assert elapsed <= 2 * LEASE, f"{new} took over after {elapsed:.2f}s"
    view = wait_for(lambda: _silent(asking, leader), 30, "the stopped node shown silent")
    assert [n["name"] for n in view["nodes"] if n["leader"]] == [new]
    # While the old leader is stopped, the new one does the shared tiers' work.
    _retention_runs_everywhere(fleet, {new: "while-paused"})

    paused.daemon.resume()
    resumed_at = datetime.now(UTC)
    down = wait_for(lambda: paused.logged("leader_stood_down"), 30, "the resumed leader to stand down")
    reason = down[-1]["reason"]
    # Stopped between two statements of its lease transaction, its session was cut by the
    # server (idle_in_transaction_session_timeout): it then stands down on that error instead.
    assert f"held by {new}" in reason or reason.startswith("the catalog failed"), reason
    _retention_runs_everywhere(fleet, {new: "after-resume"})

    # Non-overlap: every act of the old leader precedes the pause; the new leader's acts all
    # follow the pause; and the resumed one never acted again.
    acts = fleet.acts()
    old_acts = [_at(e) for e in acts[leader]]
    new_acts = [_at(e) for e in acts[new]]
    assert old_acts
    assert new_acts
    assert max(old_acts) < stopped_at < min(new_acts)
    assert not [t for t in old_acts if t >= resumed_at]
    assert all(not acts[name] for name in fleet.nodes if name not in (leader, new))
    assert all(len(names) == 1 for names in _shared_acts_by(fleet).values())
    # The first election after the pause takes the term after the paused leader's last. (On a
    # loaded machine a leader whose renewal came later than the lease loses it and takes it
    # again at its next beat: a later term, still one leader at a time.)
    elected = next(e for e in fleet.nodes[new].logged("leader_elected") if _at(e) > stopped_at)
    old_term = max(e["term"] for e in paused.logged("leader_elected") if _at(e) < stopped_at)
    assert elected["term"] == old_term + 1


def _at(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(event["timestamp"])


def _row(asking: Node, name: str) -> dict[str, Any] | None:
    view = asking.fleet()
    return next((n for n in view["nodes"] if n["name"] == name), None) if view else None


def _back(asking: Node, name: str, pid: int, since: datetime) -> dict[str, Any] | None:
    """Node ``name``'s row once it is live under ``pid`` and has heartbeated after ``since``."""
    row = _row(asking, name)
    if row is None or row["silent"] or row["pid"] != pid:
        return None
    return row if datetime.fromisoformat(row["heartbeat_at"]) > since else None


def test_a_node_killed_and_started_again_is_shown_live_with_its_new_pid(fleet: Fleet) -> None:
    asking, node = fleet.nodes[NODES[0]], fleet.nodes[NODES[1]]
    old_pid = node.pid
    node.daemon.kill()
    wait_for(lambda: _silent(asking, node.name), 30, "the killed node shown silent")

    node.daemon.start()
    wait_for(node.daemon.alive, 5, "the daemon started again")
    killed_at = datetime.now(UTC)
    back = wait_for(lambda: _back(asking, node.name, node.pid, killed_at), 30, "the node live again")
    assert back["pid"] != old_pid
    # Several heartbeats later it is still live, each one taken as its own (no re-registration).
    since = datetime.fromisoformat(back["heartbeat_at"])
    for _ in range(3):
        row = wait_for(lambda: _back(asking, node.name, node.pid, since), 10, "a later heartbeat")  # noqa: B023
        since = datetime.fromisoformat(row["heartbeat_at"])
    assert node.daemon.events(run=2)
    assert not node.logged("fleet_node_registered_again")
