"""``tierd fleet``: every daemon on the catalog, its table and its JSON."""

from __future__ import annotations

import re
from datetime import timedelta

from sqlalchemy import update

from tests.unit.cli.conftest import BOTH, Cli
from tierd.daemon.catalog import fleet
from tierd.daemon.catalog.models import Checkpoint, Job, JobKind, JobState, Node, utcnow


async def test_fleet_shows_each_node_who_leads_and_what_a_silent_one_left(cli: Cli) -> None:
    here = cli.world.config.node
    gone_step = await cli.world.add(7, on=BOTH)
    with cli.world.db.session() as s:
        fleet.register_node(s, here, version="1.0", pid=11, api="127.0.0.1:8470")
        fleet.register_node(s, "gone", version="0.9", pid=22, api="10.0.0.9:8470")
        s.execute(
            update(Node).where(Node.name == "gone").values(heartbeat_at=utcnow() - timedelta(minutes=10))
        )
        s.execute(update(Checkpoint).where(Checkpoint.id == gone_step).values(node="gone"))
        s.add(
            Job(
                kind=JobKind.COPY.value,
                checkpoint_id=gone_step,
                src_tier="nvme",
                dst_tier="pfs",
                state=JobState.QUEUED.value,
                detail={},
            )
        )
    shown = await cli("fleet", role="read")
    assert shown.code == 0, shown.err
    assert shown.lines[0] == f"nodes: 2, leader: {here} (term 0)"
    header, *rows = shown.lines[1:4]
    assert header.split() == ["NODE", "STATE", "LEADER", "HEARD", "VERSION", "PID", "COPYING"]
    by_name = {row.split()[0]: row.split() for row in rows}
    assert by_name["gone"][1] == "silent"
    # Ten minutes ago when written, read a moment later (SQLite's clock counts whole seconds).
    assert re.fullmatch(r"9m59s|10m|10m[1-9]s", by_name["gone"][2]), by_name["gone"]
    assert by_name[here][1:3] == ["live", "yes"]
    assert shown.lines[4] == "  gone left copy demo:7 nvme -> pfs (queued)"
    body = (await cli("fleet", "--json", role="read")).json()
    assert body["leader"] == here
    assert [(n["name"], n["silent"]) for n in body["nodes"]] == [("gone", True), (here, False)]
