"""The shared tiers' leader at fleet scale: eight daemons, the leader killed (SIGKILL) and then
the next one paused (SIGSTOP); each time another leads within twice the lease, the paused one
stands down when it runs again, and the shared tier's deletions happen once, by the leader.

The takeover is timed on the database's clock, from the kill to the lease's ``acquired_at``:
the daemons' own deadline, not how long this process took to see it on a loaded machine, so
the test runs beside the others."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

import pytest

from tests.fixtures.fleet import RUN, Fleet, FleetSpec, Node
from tests.fixtures.s3proxy import CountingProxy
from tests.integration.fleet_jobs import write_step

pytestmark = pytest.mark.slow

LEASE = 3.0
FLEET = {"heartbeat_interval": 1, "lease": LEASE, "node_timeout": 10}


def _one_leader(fleet: Fleet, other_than: Node | None = None) -> Node | None:
    leaders = fleet.leaders()
    if len(leaders) == 1 and leaders[0] is not other_than:
        return leaders[0]
    return None


def _takeover(fleet: Fleet, old: Node, since: datetime) -> tuple[Node, float]:
    """Wait for a leader other than ``old``; it and the seconds from ``since`` until it took the
    lease (database clock). The wait is long: only the lease's own time is asserted on."""
    new = fleet.wait_for(partial(_one_leader, fleet, old), 60, f"a leader other than {old.name}", 0.1)
    return new, fleet.takeover_seconds(since, new)


def _uploaded(proxy: CountingProxy, keys: set[str]) -> bool:
    return keys <= set(proxy.count("PutObject"))


def _s3_state(fleet: Fleet, step: int) -> str | None:
    checkpoint = fleet.checkpoints().get(step)
    replicas = {r["tier"]: r["state"] for r in checkpoint["replicas"]} if checkpoint else {}
    return replicas.get("s3")


def test_leader_killed_then_paused_and_shared_deletions_happen_once(make_fleet: Callable[..., Fleet]) -> None:
    spec = FleetSpec(
        nodes=8,
        config={"fleet": FLEET, "retention": {"interval": 1}},
        s3={"retention": {"keep_last": 1}, "delete_delay": 0},
    )
    fleet = make_fleet(spec)
    first = fleet.wait_for(partial(_one_leader, fleet), 4 * LEASE, "one leader")

    killed_at = fleet.db_clock()
    first.kill()
    second, took = _takeover(fleet, first, killed_at)
    assert took <= 2 * LEASE, f"{second.name} led {took:.1f}s after the leader was killed"

    paused_at = fleet.db_clock()
    second.pause()
    try:
        third, took = _takeover(fleet, second, paused_at)
        assert took <= 2 * LEASE, f"{third.name} led {took:.1f}s after the leader was paused"
    finally:
        second.resume()
    fleet.wait_for(
        lambda: not second.leads() and _one_leader(fleet) is third, 4 * LEASE, "the paused one to stand down"
    )
    stood_down = [e for name, e in fleet.events("leader_stood_down") if name == second.name]
    assert stood_down, f"{second.name} never logged that it stood down"

    writer = next(n for n in fleet.nodes if n.daemon.alive() and n is not second)
    written: dict[str, bytes] = {}
    proxy = fleet.proxy
    assert proxy is not None
    for step in (1, 2, 3):  # one after another: retention would not upload a step it already drops
        files = write_step(writer.watch_dir / f"step_{step}", 2, 16 * 1024, seed=step)
        keys = {f"{RUN}/step_{step}/{name}": data for name, data in files.items()}
        written.update(keys)
        fleet.wait_for(partial(_uploaded, proxy, set(keys)), 60, f"step {step} uploaded")
    fleet.wait_for(lambda: _s3_state(fleet, 3) == "verified", 60, "step 3 verified on s3")
    fleet.wait_for(
        lambda: _s3_state(fleet, 1) in (None, "deleted") and _s3_state(fleet, 2) in (None, "deleted"),
        60,
        "steps 1 and 2 deleted from s3 by retention",
    )
    put, deleted = proxy.count("PutObject"), proxy.count("DeleteObjects")
    assert put == dict.fromkeys(written, 1)
    old = {key for key in written if "/step_3/" not in key}
    assert deleted == dict.fromkeys(old, 1), "each old object deleted once"
    acting = {name for name, e in fleet.events("leader_acts") if e.get("tier") == "s3"}
    assert acting == {third.name}, f"only the leader deletes on the shared tier: {acting}"

    view = fleet.wait_for(partial(_silent_view, fleet, first), 30, f"{first.name} shown silent in /v1/fleet")
    assert view["leader"] == third.name
    assert {n["name"] for n in view["nodes"]} == {n.name for n in fleet.nodes}
    assert {n["name"] for n in view["nodes"] if n["silent"]} == {first.name}
    assert [n["name"] for n in view["nodes"] if n["leader"]] == [third.name]


def _silent_view(fleet: Fleet, dead: Node) -> dict[str, Any] | None:
    view: dict[str, Any] = fleet.any_node().get("/v1/fleet")
    return view if any(n["name"] == dead.name and n["silent"] for n in view["nodes"]) else None
