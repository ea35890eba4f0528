"""Clock skew between nodes: two of four daemons run under libfaketime, one 8 s ahead and one
8 s behind (more than twice the lease). Leases live on the database's clock, so the skewed
daemons neither steal a live lease nor lose their own: one leader throughout, and a failover
within twice the lease when it dies, whichever clock the next one has. The failover is timed
on the database's clock (kill to the lease's ``acquired_at``), not by how soon this process
sees it, so the test runs beside the others."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial

import pytest

from tests.fixtures.fleet import RUN, Fleet, FleetSpec, Node
from tests.integration.fleet_jobs import write_step

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("faketime") is None, reason="faketime not installed (.ci/run installs it)"
    ),
]

LEASE = 3.0
SKEWS = {1: "+8s", 2: "-8s"}


def _one_leader(fleet: Fleet, other_than: Node | None = None) -> Node | None:
    leaders = fleet.leaders()
    return leaders[0] if len(leaders) == 1 and leaders[0] is not other_than else None


def _leaders_over(fleet: Fleet, seconds: float) -> set[tuple[str, ...]]:
    """Every set of nodes that said they lead, sampled every 0.1 s for ``seconds`` (a window,
    not a wait), and a set of its own if the lease changed hands meanwhile (its term grew)."""
    seen: set[tuple[str, ...]] = set()
    term = fleet.lease().term
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        seen.add(tuple(n.name for n in fleet.leaders()))
        time.sleep(0.1)
    if fleet.lease().term != term:
        seen.add(("the lease changed hands",))
    return seen


def test_skewed_clocks_neither_steal_nor_lose_the_lease(make_fleet: Callable[..., Fleet]) -> None:
    spec = FleetSpec(
        nodes=4,
        config={"fleet": {"heartbeat_interval": 1, "lease": LEASE, "node_timeout": 10}},
        s3={"retention": {"keep_within": "1h"}, "delete_delay": 0},
    )
    fleet = make_fleet(spec, start=False)
    for index, skew in SKEWS.items():
        fleet.nodes[index].daemon.wrapper = ("faketime", "-f", skew)
    fleet.start()
    skewed = {fleet.nodes[i].name for i in SKEWS}
    first = fleet.wait_for(partial(_one_leader, fleet), 4 * LEASE, "one leader")
    ahead, behind = (_started_at(fleet.nodes[i]) for i in SKEWS)
    assert 11 < ahead - behind < 21, "the two daemons' clocks are not 16 s apart"

    assert _leaders_over(fleet, 3 * LEASE) == {(first.name,)}, "the leader changed or two led at once"

    leader = first
    while leader.name not in skewed:  # kill the leader until a skewed node leads (at most twice)
        killed_at = fleet.db_clock()
        leader.kill()
        new = fleet.wait_for(partial(_one_leader, fleet, leader), 60, f"a leader after {leader.name}", 0.1)
        took = fleet.takeover_seconds(killed_at, new)
        assert took <= 2 * LEASE, f"{new.name} took over {took:.1f}s after the kill"
        leader = new
        assert _leaders_over(fleet, 2 * LEASE) == {(leader.name,)}

    written: dict[str, bytes] = {}
    for step, node in enumerate(n for n in fleet.nodes if n.daemon.alive()):
        files = write_step(node.watch_dir / f"step_{step}", 2, 4096, seed=step)
        written.update({f"{RUN}/step_{step}/{name}": data for name, data in files.items()})
    steps = {int(key.split("/")[1].removeprefix("step_")) for key in written}
    for step in steps:
        fleet.wait_for(partial(_verified, fleet, step), 60, f"step {step} verified on pfs and s3")
    assert fleet.proxy is not None
    assert fleet.proxy.count("PutObject") == dict.fromkeys(written, 1), "a skewed node took a live copy job"
    assert not fleet.events("leader_acts"), "keep_within: 1h deleted a step seconds old"


def _started_at(node: Node) -> float:
    """When the daemon says (its own clock) that it started watching."""
    event = next(e for e in node.daemon.events() if e.get("event") == "watching")
    return datetime.fromisoformat(event["timestamp"]).timestamp()


def _verified(fleet: Fleet, step: int) -> bool:
    checkpoint = fleet.checkpoints().get(step)
    states = {r["tier"]: r["state"] for r in checkpoint["replicas"]} if checkpoint else {}
    return states.get("pfs") == states.get("s3") == "verified"
