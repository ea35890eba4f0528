"""Three real daemons on one real PostgreSQL: retention on node-local tier 0 removes every
node's part of an old step, each daemon its own, and the step leaves tier 0 with the last."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures import http
from tests.fixtures.daemon import Daemon
from tests.fixtures.pgserver import PostgresServer
from tests.integration.daemon_helpers import config_dict, wait_for
from tests.unit.detect.fleet import age, save_dcp_files

pytestmark = pytest.mark.slow


def _node(root: Path, shared: Path, url: str, name: str) -> tuple[Daemon, str]:
    own = root / name
    (own / "nvme" / "demo").mkdir(parents=True)
    nvme: dict[str, Any] = {"name": "nvme", "kind": "posix", "path": str(own / "nvme")}
    tiers: list[dict[str, Any]] = [
        {**nvme, "retention": {"keep_last": 1}, "delete_delay": 0},
        {"name": "pfs", "kind": "posix", "path": str(shared)},
    ]
    watch = [{"path": str(own / "nvme" / "demo"), "run": "demo", "nodes": 3, "settle_seconds": 0.5}]
    data = config_dict(
        own,
        tiers,
        node=name,
        catalog={"url": url},
        watch=watch,
        reconcile_interval_seconds=1,
        retention={"interval": "1s"},
    )
    return Daemon.prepare(own, data), f"http://{data['api']['listen']}"


@pytest.fixture
def fleet(tmp_path: Path, postgres_server: PostgresServer) -> Iterator[list[tuple[Daemon, str]]]:
    url = postgres_server.new_database()
    shared = tmp_path / "pfs"
    shared.mkdir()
    nodes = [_node(tmp_path, shared, url, f"n{i}") for i in range(3)]
    try:
        yield nodes
    finally:
        for daemon, _ in nodes:
            daemon.stop()


def _step(api: str, step: int) -> dict[str, Any] | None:
    try:
        page = http.get(f"{api}/v1/checkpoints", params={"run": "demo", "step": step}, timeout=5).json()
    except httpx.HTTPError:
        return None
    items = page.get("items", [])
    return items[0] if items else None


def _write(fleet: list[tuple[Daemon, str]], scratch: Path, step: int) -> None:
    """A real DCP step spread over the nodes: one shard each, ``.metadata`` on n0."""
    whole = scratch / f"whole{step}"
    save_dcp_files(whole, step, len(fleet))
    shards = sorted(p.name for p in whole.iterdir() if p.name.endswith(".distcp"))
    for index, (daemon, _) in enumerate(fleet):
        target = _dir(daemon, step)
        target.mkdir()
        for name in [shards[index], *([".metadata"] if index == 0 else [])]:
            (target / name).write_bytes((whole / name).read_bytes())
        age(target)


def _dir(daemon: Daemon, step: int) -> Path:
    return daemon.config_path.parent / "nvme" / "demo" / f"step_{step}"


def test_keep_last_on_tier_0_removes_every_nodes_part_of_an_old_step(
    fleet: list[tuple[Daemon, str]], tmp_path: Path
) -> None:
    for step in (3, 4):
        _write(fleet, tmp_path / "scratch", step)
    for daemon, _ in fleet:
        daemon.start()
    api = fleet[0][1]

    def gone() -> dict[str, Any] | None:
        step = _step(api, 3)
        states = {r["tier"]: r["state"] for r in step["replicas"]} if step is not None else {}
        return step if states.get("nvme") == "deleted" else None

    old = wait_for(gone, 120, "step 3 deleted from every node's tier 0")
    assert {p["node"]: p["tiers"]["nvme"]["state"] for p in old["parts"]} == dict.fromkeys(
        ("n0", "n1", "n2"), "deleted"
    )
    assert {r["tier"]: r["state"] for r in old["replicas"]}["pfs"] == "verified"
    assert not any(_dir(daemon, 3).exists() for daemon, _ in fleet)
    assert all(_dir(daemon, 4).exists() for daemon, _ in fleet), "the newest step stays on every node"
    new = _step(api, 4)
    assert new is not None
    assert {r["tier"]: r["state"] for r in new["replicas"]}["nvme"] == "verified"
