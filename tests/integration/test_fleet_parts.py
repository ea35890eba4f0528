"""Three real daemons on one real PostgreSQL, each with its own tier 0, sharing a POSIX "pfs".

A DCP step is spread over the three nodes (the coordinator's node alone has ``.metadata``);
each daemon records its part, the step completes with the last one, each node copies its
part into pfs, and pfs's replica is verified only once every part is there. The API shows
what a node's missing part leaves the step waiting for.
"""

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
    tiers = [
        {"name": "nvme", "kind": "posix", "path": str(own / "nvme")},
        {"name": "pfs", "kind": "posix", "path": str(shared)},
    ]
    watch = [{"path": str(own / "nvme" / "demo"), "run": "demo", "nodes": 3, "settle_seconds": 0.5}]
    data = config_dict(own, tiers, node=name, catalog={"url": url}, watch=watch, reconcile_interval_seconds=1)
    daemon = Daemon.prepare(own, data)
    return daemon, f"http://{data['api']['listen']}"


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


def _step(api: str) -> dict[str, Any] | None:
    try:
        page = http.get(f"{api}/v1/checkpoints", params={"run": "demo", "step": 3}, timeout=5).json()
    except httpx.HTTPError:
        return None
    items = page.get("items", [])
    return items[0] if items else None


def test_three_daemons_complete_a_step_only_with_every_part(
    fleet: list[tuple[Daemon, str]], tmp_path: Path
) -> None:
    whole = tmp_path / "whole"
    save_dcp_files(whole, 3, 3)
    shards = sorted(p.name for p in whole.iterdir() if p.name.endswith(".distcp"))
    for index, (daemon, _) in enumerate(fleet):
        target = daemon.config_path.parent / "nvme" / "demo" / "step_3"
        target.mkdir()
        for name in [shards[index], *([".metadata"] if index == 0 else [])]:
            (target / name).write_bytes((whole / name).read_bytes())
        age(target)
    for daemon, _ in fleet[:2]:
        daemon.start()
    api = fleet[0][1]

    def parts(count: int) -> dict[str, Any] | None:
        step = _step(api)
        return step if step is not None and len(step["parts"]) == count else None

    def on_pfs() -> dict[str, Any] | None:
        step = _step(api)
        states = {r["tier"]: r["state"] for r in step["replicas"]} if step is not None else {}
        return step if states.get("pfs") == "verified" else None

    waiting = wait_for(lambda: parts(2), 60, "two parts")
    assert waiting["state"] == "waiting"
    assert waiting["missing"]["files"] == [shards[2]]
    assert waiting["replicas"] == []
    assert not (tmp_path / "pfs" / "demo").exists(), "a waiting step was copied"

    fleet[2][0].start()
    done = wait_for(on_pfs, 90, "the step verified on pfs")
    assert done["state"] == "complete"
    assert done["missing"] is None
    assert sorted(p["node"] for p in done["parts"]) == ["n0", "n1", "n2"]
    assert all(p["tiers"]["pfs"]["state"] == "verified" for p in done["parts"])
    copied = sorted(p.name for p in (tmp_path / "pfs" / "demo" / "step_3").iterdir())
    assert copied == sorted([".metadata", *shards])
